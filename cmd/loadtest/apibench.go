package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store/storetest"
)

// The API rows (issue 31): destinations made through the API by 8 clients on one
// replica, each trusted by its own role; then the time from a create's answer to its
// first delivered event, for destinations of accounts made through the API one at a
// time; then a restart, timed until every API destination has delivered an event.
const (
	apiClients    = 8
	apiLatProbes  = 50
	apiAdminToken = "bench-admin-token-0123456789abcdef"
)

// Aims of issue 31.
const (
	aimCreatesPerSec = 1000
	aimCreateToFirst = time.Second
	aimRestartAll    = 30 * time.Second
	aimAPIDests      = 100000
)

// apiResult is what the API rows measured.
type apiResult struct {
	dests       int
	createsPerS float64
	createsTook time.Duration
	refused     int64           // creates that did not answer 201
	firstLat    []time.Duration // create's answer → first delivery, sorted
	restartAll  time.Duration   // relay start → every API destination delivered an event
	bareRestart time.Duration   // the bare path of as many: probe, session and one write each (bareRestart)
	bareErr     string          // why bareRestart was not measured
	deliveries  float64         // then one more event to all of them: deliveries/s
	hwm         int             // peak RSS of the restarted relay, kB
	err         string
}

// apiRow runs the API rows with n destinations on redisURL.
func (e *benchEnv) apiRow(ctx context.Context, redisURL string, rdb redis.UniversalClient, n int) (res apiResult) {
	res.dests = n
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		res.err = err.Error()
		return
	}
	port, err := freePort()
	if err != nil {
		res.err = err.Error()
		return
	}
	api := fmt.Sprintf("http://127.0.0.1:%d", port)
	exchange := fmt.Sprintf("bench.api.%d", time.Now().Unix())
	cfg := fmt.Sprintf(`identity:
  name: mercamap
  aws_principal_arn: arn:aws:iam::999999999999:role/relay-delivery
  external_id_secret: loadtest-external-id-secret-0123456789abcdef
rabbitmq: {url: %s, exchange: %s, queue: %s, prefetch: 256}
redis: {url: %q}
signature: {keys: [env:BENCH_HMAC_KEY]}
api:
  listen: "127.0.0.1:%d"
  metrics_listen: "127.0.0.1:0"
  tokens: [{scope: admin, token: env:BENCH_ADMIN_TOKEN}]
  destinations_per_account: %d
  destination_changes_per_account: {count: 100000000, per: 1m}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s}
  sts_budget: {per_account: {count: 1000000, per: 1m}}
delivery:
  lease_ttl: 15s
accounts:
  - {id: acct_bench, tenants: [single-tenant]}
destinations: []
`, e.amqpURL, exchange, exchange, redisURL, port, n+1, e.stsURL, e.bus.url)
	cfgPath := filepath.Join(e.stateDir, "relay.bench.api.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		res.err = err.Error()
		return
	}
	trust := func(acct, id, role string) { e.trustStored(ctx, rdb, role, storetest.DestKey(acct, id)) }
	starts := 0
	start := func() (*replica, error) {
		starts++ // each start logs to its own file: the restart keeps the first run's log
		rep := &replica{name: fmt.Sprintf("bench-api-%d", starts), bin: e.relayBin, config: cfgPath, logDir: e.stateDir,
			env: []string{"BENCH_HMAC_KEY=" + hex.EncodeToString(e.key), "BENCH_ADMIN_TOKEN=" + apiAdminToken,
				"AWS_ACCESS_KEY_ID=AKIDBENCH", "AWS_SECRET_ACCESS_KEY=bench-not-a-secret", "AWS_EC2_METADATA_DISABLED=true"}}
		if err := rep.start(); err != nil {
			return nil, err
		}
		return rep, waitLog(ctx, []*replica{rep}, e.stateDir, `"msg":"consuming"`, 300*time.Second)
	}
	rep, err := start()
	if err != nil {
		res.err = err.Error()
		return
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: apiClients}}
	post := func(path, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiAdminToken)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// Creates: 8 clients, each its share of the ids.
	role := func(i int) string { return fmt.Sprintf("arn:aws:iam::111122223333:role/bench-api-%d", i) }
	for i := range n {
		trust("acct_bench", fmt.Sprintf("a%d", i), role(i))
	}
	var next, refused atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range apiClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				body := fmt.Sprintf(`{"id":"a%d","account":"acct_bench","bus_arn":"%s%d","role_arn":%q}`, i, apiBusPrefix, i, role(i))
				if code, _ := post("/v1/connectors/eventbridge/destinations", body); code != http.StatusCreated {
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	res.createsTook, res.refused = time.Since(t0), refused.Load()
	res.createsPerS = float64(n) / res.createsTook.Seconds()
	logf("api: %d creates in %s (%.0f/s), %d refused", n, res.createsTook.Round(time.Millisecond), res.createsPerS, res.refused)

	// A create's answer to its first delivery: an account of its own (its tenant), one
	// destination, one event published as soon as the create answered.
	pub := &publisher{urls: []string{e.amqpURL}, exchange: exchange}
	defer pub.close()
	for k := range apiLatProbes {
		acct, tenant, id := fmt.Sprintf("acct_lat%d", k), fmt.Sprintf("t-lat-%d", k), fmt.Sprintf("lat%d", k)
		if code, body := post("/v1/accounts", fmt.Sprintf(`{"id":%q,"tenants":[%q]}`, acct, tenant)); code != http.StatusCreated {
			res.err = fmt.Sprintf("account %s: %d %s", acct, code, body)
			rep.kill(syscall.SIGTERM)
			return
		}
		trust(acct, id, role(n+k))
		base := e.bus.count()
		body := fmt.Sprintf(`{"id":%q,"account":%q,"bus_arn":"%slat-%d","role_arn":%q}`, id, acct, apiBusPrefix, k, role(n+k))
		if code, b := post("/v1/connectors/eventbridge/destinations", body); code != http.StatusCreated {
			res.err = fmt.Sprintf("destination %s: %d %s", id, code, b)
			rep.kill(syscall.SIGTERM)
			return
		}
		answered := time.Now()
		j := jobevent.Job{ID: uuid(), Status: "completed", Tenant: tenant}
		pub.send(ctx, []*event{{id: j.EventID(), key: j.RoutingKey(), msg: jobevent.Build(j, exchange, e.key, time.Now())}})
		if !waitCount(ctx, e.bus, base, 1, 30*time.Second) {
			// Where it stopped: the event in the account's log or not (routing), and the
			// destination's state (its setup check, its cursor).
			inLog := rdb.XLen(ctx, storetest.LogKey(acct)).Val()
			st := rdb.HGetAll(ctx, storetest.DestKey(acct, id)).Val()
			res.err = fmt.Sprintf("probe %d: no delivery within 30 s of the create (the account's log holds %d events; destination status %q, cursor %q, pending %q; logs in %s)",
				k, inLog, st["status"], st["cursor"], st["pending"], e.stateDir)
			rep.kill(syscall.SIGTERM)
			return
		}
		res.firstLat = append(res.firstLat, time.Since(answered))
	}
	slices.Sort(res.firstLat)

	// Restart: every API destination leased, checked and delivering.
	rep.kill(syscall.SIGTERM)
	t1 := time.Now()
	if rep, err = start(); err != nil {
		res.err = "restart: " + err.Error()
		return
	}
	defer rep.kill(syscall.SIGTERM)
	base := e.bus.count()
	pub.send(ctx, []*event{sizedEvent(exchange, e.key, 0, 1024)})
	if !waitCount(ctx, e.bus, base, n, 300*time.Second) {
		res.err = fmt.Sprintf("after the restart %d of %d API destinations delivered, then none for 300 s", e.bus.count()-base, n)
		return
	}
	res.restartAll = time.Since(t1)
	// Delivery once all are leased and hold a session: one more event to every one, as
	// the config row of as many destinations does (100000:1:0), timed to the last write.
	base = e.bus.count()
	t2 := time.Now()
	pub.send(ctx, []*event{sizedEvent(exchange, e.key, 1, 1024)})
	if !waitCount(ctx, e.bus, base, n, 300*time.Second) {
		res.err = fmt.Sprintf("the second event reached %d of %d API destinations, then none for 300 s", e.bus.count()-base, n)
		return
	}
	res.deliveries = float64(n) / time.Since(t2).Seconds()
	_, res.hwm = procStatus(rep.pid())
	logf("api: restart to all %d delivering %s, then %.0f deliveries/s, peak RSS %d kB", n, res.restartAll.Round(time.Millisecond), res.deliveries, res.hwm)
	// The restart's yardstick, with the relay stopped: the same calls from a bare writer.
	rep.kill(syscall.SIGTERM)
	if res.bareRestart, err = e.bareRestart(ctx, n); err != nil {
		res.bareErr = err.Error()
	}
	logf("api: bare path to all %d (probe, session, one write each) %s %s", n, res.bareRestart.Round(time.Millisecond), res.bareErr)
	return res
}

// apiBusPrefix names the API rows' buses.
const apiBusPrefix = "arn:aws:events:us-east-1:111122223333:event-bus/bench-api-"

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// apiAims judges the API rows against issue 31's aims; results are the run's other rows
// (the config row of as many destinations gives the deliveries' yardstick).
func apiAims(r *apiResult, results []benchResult) []aim {
	if r == nil {
		return nil
	}
	scale := ""
	if r.dests != aimAPIDests {
		scale = fmt.Sprintf(" (this run: %s destinations, not %s)", thousands(r.dests), thousands(aimAPIDests))
	}
	creates := aim{what: "creates through the API, 8 clients, one replica", target: fmt.Sprintf("≥ %s destinations/s", thousands(aimCreatesPerSec)),
		figure: "not measured: " + r.err}
	first := aim{what: "from a create's answer to its first delivered event (an event published right after), p99", target: "≤ " + aimCreateToFirst.String(),
		figure: "not measured: " + r.err}
	restart := aim{what: fmt.Sprintf("%s destinations made through the API, relay restart to every destination leased and delivering", thousands(aimAPIDests)) + scale,
		target: "≤ " + aimRestartAll.String(), figure: "not measured: " + r.err}
	rss := aim{what: "the same: relay peak RSS" + scale, target: "≤ 1 GiB", figure: "not measured: " + r.err}
	rate := aim{what: "the same: deliveries/s of one event to all of them / the bare fan-out" + scale,
		target: "≥ the config row's (" + thousands(aimAPIDests) + ":1:0)", figure: "not measured: " + r.err}
	if r.createsPerS > 0 {
		creates.figure = fmt.Sprintf("%.0f/s (%s in %s, %d refused)", r.createsPerS, thousands(r.dests), r.createsTook.Round(time.Millisecond), r.refused)
		creates.state = judge(r.createsPerS >= aimCreatesPerSec && r.refused == 0)
	}
	if len(r.firstLat) > 0 {
		p := func(q float64) time.Duration {
			return r.firstLat[min(len(r.firstLat)-1, int(q*float64(len(r.firstLat))))]
		}
		first.figure = fmt.Sprintf("%s (p50 %s, max %s, %d creates, each in an account of its own made just before)",
			p(0.99).Round(time.Millisecond), p(0.5).Round(time.Millisecond), r.firstLat[len(r.firstLat)-1].Round(time.Millisecond), len(r.firstLat))
		first.state = judge(p(0.99) <= aimCreateToFirst)
	}
	if r.restartAll > 0 {
		restart.figure = r.restartAll.Round(100 * time.Millisecond).String()
		if r.bareErr != "" {
			restart.figure += "; the bare path not measured: " + r.bareErr
		} else {
			restart.figure += fmt.Sprintf("; the bare path (a probe, a session and one write to each of as many, 1,024 writers, no relay) %s",
				r.bareRestart.Round(100*time.Millisecond))
		}
		restart.state = judge(r.restartAll <= aimRestartAll && r.dests >= aimAPIDests)
		rss.figure = fmt.Sprintf("%d MiB", r.hwm/1024)
		rss.state = judge(r.hwm <= 1<<20 && r.dests >= aimAPIDests)
	}
	if r.deliveries > 0 {
		row, ok := findRow(results, func(b benchRun) bool { return b.dests == aimAPIDests && b.events == 1 })
		switch {
		case !ok || row.reps[0].bare == nil || row.reps[0].bare.perSec <= 0:
			rate.figure = fmt.Sprintf("%.0f/s; no config row %s:1:0 with its bare fan-out in this run to judge it by", r.deliveries, thousands(aimAPIDests))
		default:
			bare := row.reps[0].bare.perSec
			api, cfg := r.deliveries/bare, row.reps[0].perSec/bare
			rate.figure = fmt.Sprintf("%.0f%% (%.0f against the bare fan-out's %.0f/s); the config row %.0f%%", 100*api, r.deliveries, bare, 100*cfg)
			rate.state = judge(api >= cfg && r.dests >= aimAPIDests)
		}
	}
	return []aim{creates, first, restart, rss, rate}
}
