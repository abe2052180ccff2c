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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/benchkit"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store/storetest"
)

// The API rows (issue 31): destinations made through the API by 8 clients on one
// replica, each trusted by its own role; then the time from a create's answer to its
// first delivered event, for destinations of accounts made through the API one at a
// time; then a restart, timed until every API destination has delivered an event.
const (
	apiClients      = 8
	apiLatProbes    = 50
	apiCreateChunks = 5 // the creates, and their bare yardstick, run in turn in this many chunks
	apiRestarts     = 2 // restarts, each followed by the bare restart yardstick: 3 took a run past 30 minutes (runs 10, 11) for a verdict unsure at either count
	apiAdminToken   = "bench-admin-token-0123456789abcdef"
)

// Aims of issue 31.
const (
	aimCreatesShare  = 0.80 // creates through the API / the bare creates
	aimCreateToFirst = time.Second
	aimRestartRatio  = 1.25 // restart / the bare restart yardstick
	aimAPIDests      = 100000
)

// apiResult is what the API rows measured.
type apiResult struct {
	dests         int
	createsPerS   float64
	createsTook   time.Duration
	refused       int64           // creates that did not answer 201
	firstLat      []time.Duration // create's answer → first delivery, sorted
	restarts      []time.Duration // each restart: relay start → every API destination delivered an event
	bareRestarts  []time.Duration // after each, the bare path of as many: probe, session and one write each (bareRestart)
	bareErr       string          // why bareRestart was not measured
	creates       []createChunk   // the creates through the API, chunk by chunk
	bareCreates   []createChunk   // after each chunk, as many creates' STS and Redis work done bare (bareCreates)
	bareCreateErr string
	deliveries    []float64 // after each restart, one more event to all of them: deliveries/s
	hwm           int       // peak RSS of the restarted relay, kB
	err           string
}

// apiRow runs the API rows with n destinations on redisURL.
func (e *benchEnv) apiRow(ctx context.Context, redisURL string, rdb redis.UniversalClient, n int) (res apiResult) {
	res.dests = n
	if err := emptyRedis(ctx, rdb); err != nil {
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

	// Creates: 8 clients, each its share of the ids, in apiCreateChunks chunks; after
	// each, as many creates of the bare yardstick (bareCreates) on a database of its own.
	role := func(i int) string { return fmt.Sprintf("arn:aws:iam::111122223333:role/bench-api-%d", i) }
	for i := range n {
		trust("acct_bench", fmt.Sprintf("a%d", i), role(i))
	}
	bareDB, err := e.newBareCreates(ctx, redisURL, n)
	if err != nil {
		res.err = err.Error()
		rep.kill(syscall.SIGTERM)
		return
	}
	defer bareDB.close()
	var refused atomic.Int64
	create := func(i int) {
		body := fmt.Sprintf(`{"id":"a%d","account":"acct_bench","bus_arn":"%s%d","role_arn":%q}`, i, apiBusPrefix, i, role(i))
		if code, _ := post("/v1/connectors/eventbridge/destinations", body); code != http.StatusCreated {
			refused.Add(1)
		}
	}
	chunk := (n + apiCreateChunks - 1) / apiCreateChunks
	for from := 0; from < n; from += chunk {
		to := min(from+chunk, n)
		sts0, calls0, cpu0 := e.stsCalls.Load(), redisCalls(ctx, rdb), redisCPUTotal(ctx, rdb)
		took := e.quiet(func() { clients(ctx, apiClients, from, to, create) })
		res.creates = append(res.creates, createChunk{n: to - from, took: took, sts: e.stsCalls.Load() - sts0,
			redisCalls: redisCalls(ctx, rdb) - calls0, redisCPU: redisCPUTotal(ctx, rdb) - cpu0})
		b := bareDB.run(ctx, e, from, to)
		if b.err != "" {
			res.bareCreateErr = b.err
		}
		res.bareCreates = append(res.bareCreates, b)
		logf("api: creates %d–%d: %s through the API, %s bare (%s)", from, to, took.Round(time.Millisecond), b.took.Round(time.Millisecond), b.err)
	}
	for _, c := range res.creates {
		res.createsTook += c.took
	}
	res.refused = refused.Load()
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

	// Restarts: every API destination leased, checked and delivering; each followed by
	// the bare yardstick (bareRestart), with the relay stopped.
	rep.kill(syscall.SIGTERM)
	for k := range apiRestarts {
		t1 := time.Now()
		if rep, err = start(); err != nil {
			res.err = "restart: " + err.Error()
			return
		}
		base := e.bus.count()
		pub.send(ctx, []*event{sizedEvent(exchange, e.key, 2*k, 1024)})
		if !waitCount(ctx, e.bus, base, n, 300*time.Second) {
			res.err = fmt.Sprintf("after the restart %d of %d API destinations delivered, then none for 300 s", e.bus.count()-base, n)
			rep.kill(syscall.SIGTERM)
			return
		}
		res.restarts = append(res.restarts, time.Since(t1))
		// Delivery once all are leased and hold a session: one more event to every one, as
		// the config row of as many destinations does (100000:1:0), timed to the last write;
		// after every restart, so the figure has a spread like the config row's.
		base = e.bus.count()
		t2 := time.Now()
		pub.send(ctx, []*event{sizedEvent(exchange, e.key, 2*k+1, 1024)})
		if !waitCount(ctx, e.bus, base, n, 300*time.Second) {
			res.err = fmt.Sprintf("the second event reached %d of %d API destinations, then none for 300 s", e.bus.count()-base, n)
			rep.kill(syscall.SIGTERM)
			return
		}
		res.deliveries = append(res.deliveries, float64(n)/time.Since(t2).Seconds())
		_, hwm := procStatus(rep.pid())
		res.hwm = max(res.hwm, hwm)
		logf("api: restart %d to all %d delivering %s, peak RSS %d kB", k+1, n, res.restarts[k].Round(time.Millisecond), hwm)
		rep.kill(syscall.SIGTERM)
		bare, err := e.bareRestart(ctx, n)
		if err != nil {
			res.bareErr = err.Error()
			logf("api: bare path after restart %d failed: %s", k+1, err)
			break
		}
		res.bareRestarts = append(res.bareRestarts, bare)
		logf("api: bare path to all %d (probe, session, one write each) %s", n, bare.Round(time.Millisecond))
	}
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

// apiAims judges the API rows against issue 31's aims as issue 46 restates them (the
// creates and the restart against their bare yardsticks, chunk by chunk and restart by
// restart); results are the run's other rows (the config row of as many destinations
// gives the deliveries' yardstick).
func apiAims(r *apiResult, results []benchResult) []aim {
	if r == nil {
		return nil
	}
	scale := ""
	if r.dests != aimAPIDests {
		scale = fmt.Sprintf(" (this run: %s destinations, not %s)", thousands(r.dests), thousands(aimAPIDests))
	}
	creates := aim{what: "creates through the API, 8 clients, one replica / the same creates' STS and Redis work done bare by 8 clients (registry record, state reset, probe, session), chunks run in turn" + scale,
		target: fmt.Sprintf("≥ %.0f%%", 100*aimCreatesShare), figure: "not measured: " + r.err}
	first := aim{what: "from a create's answer to its first delivered event (an event published right after), p99", target: "≤ " + aimCreateToFirst.String(),
		figure: "not measured: " + r.err}
	restart := aim{what: fmt.Sprintf("%s destinations made through the API, relay restart to every destination leased and delivering / the bare restart yardstick (a probe, a session and one write to each, 1,024 writers, no relay), each restart followed by one", thousands(aimAPIDests)) + scale,
		target: fmt.Sprintf("≤ %.2f×", aimRestartRatio), figure: "not measured: " + r.err}
	rss := aim{what: "the same: relay peak RSS" + scale, target: "≤ 1 GiB", figure: "not measured: " + r.err}
	rate := aim{what: "the same: deliveries/s of one event to all of them / the bare fan-out" + scale,
		target: "≥ 100% of the config row's (" + thousands(aimAPIDests) + ":1:0)", figure: "not measured: " + r.err}
	if len(r.creates) > 0 {
		var apis, bares []float64 // each chunk's creates/s through the API and bare
		var api, bare createChunk
		for i, c := range r.creates {
			api.n, api.took, api.sts, api.redisCalls, api.redisCPU = api.n+c.n, api.took+c.took, api.sts+c.sts, api.redisCalls+c.redisCalls, api.redisCPU+c.redisCPU
			if i < len(r.bareCreates) && r.bareCreates[i].err == "" && r.bareCreates[i].took > 0 {
				b := r.bareCreates[i]
				apis, bares = append(apis, c.perSec()), append(bares, b.perSec())
				bare.n, bare.took, bare.sts, bare.redisCalls, bare.redisCPU = bare.n+b.n, bare.took+b.took, bare.sts+b.sts, bare.redisCalls+b.redisCalls, bare.redisCPU+b.redisCPU
			}
		}
		per := func(c createChunk) string {
			return fmt.Sprintf("%.1f STS calls, %.1f Redis commands and %.0f µs of Redis a create", float64(c.sts)/float64(c.n),
				float64(c.redisCalls)/float64(c.n), float64(c.redisCPU.Microseconds())/float64(c.n))
		}
		switch {
		case len(apis) == 0:
			creates.figure = fmt.Sprintf("%.0f/s; the bare creates failed: %s", r.createsPerS, r.bareCreateErr)
		default:
			sp := pairedSpread(apis, bares)
			creates.figure = fmt.Sprintf("%s; %.0f against %.0f/s (%s, %d refused); through the API %s, bare %s",
				sp.percent("chunks"), r.createsPerS, float64(bare.n)/bare.took.Seconds(), thousands(r.dests), r.refused, per(api), per(bare))
			creates.state = sp.atLeast(aimCreatesShare)
			if r.refused > 0 {
				creates.state = notMet
			}
		}
	}
	if len(r.firstLat) > 0 {
		p := func(q float64) time.Duration {
			return r.firstLat[min(len(r.firstLat)-1, int(q*float64(len(r.firstLat))))]
		}
		first.figure = fmt.Sprintf("%s (p50 %s, max %s, %d creates, each in an account of its own made just before)",
			p(0.99).Round(time.Millisecond), p(0.5).Round(time.Millisecond), r.firstLat[len(r.firstLat)-1].Round(time.Millisecond), len(r.firstLat))
		first.state = judge(p(0.99) <= aimCreateToFirst)
	}
	if len(r.restarts) > 0 {
		var relays, bares []float64
		for i, d := range r.restarts {
			if i < len(r.bareRestarts) && r.bareRestarts[i] > 0 {
				relays, bares = append(relays, d.Seconds()), append(bares, r.bareRestarts[i].Seconds())
			}
		}
		restart.figure = fmt.Sprintf("restarts %s", durations(r.restarts))
		if len(relays) == 0 {
			restart.figure += "; the bare path not measured: " + r.bareErr
		} else {
			sp := pairedSpread(relays, bares)
			restart.figure = fmt.Sprintf("%s; restarts %s against %s", sp.ratio("restarts"), durations(r.restarts), durations(r.bareRestarts))
			if r.bareErr != "" {
				restart.figure += fmt.Sprintf(" (the bare path after restart %d failed: %s)", len(r.bareRestarts)+1, r.bareErr)
			}
			restart.state = sp.atMost(aimRestartRatio)
			if r.dests < aimAPIDests {
				restart.state = notMet
			}
		}
		rss.figure = fmt.Sprintf("%d MiB (the most of %d restarts)", r.hwm/1024, len(r.restarts))
		rss.state = judge(r.hwm <= 1<<20 && r.dests >= aimAPIDests)
	}
	if len(r.deliveries) > 0 {
		row, ok := findRow(results, func(b benchRun) bool { return b.dests == aimAPIDests && b.events == 1 })
		switch {
		case !ok || len(row.barePerSecs()) == 0:
			rate.figure = fmt.Sprintf("%.0f/s; no config row %s:1:0 with its bare fan-out in this run to judge it by", benchkit.Median(r.deliveries), thousands(aimAPIDests))
		default:
			// Each restart's deliveries/s over the config row's runs: the same code path, so
			// the interval holds both spreads (spread.over) and one crossing 100% is unsure.
			bare := benchkit.Median(row.barePerSecs())
			api := spreadOf(r.deliveries).over(spreadOf(row.perSecs()))
			rate.figure = fmt.Sprintf("%s of the config row's (%.0f/s after each restart, median, against its %.0f/s; the bare fan-out %.0f/s: %.0f%% against %.0f%%)",
				api.percent("restarts"), benchkit.Median(r.deliveries), benchkit.Median(row.perSecs()), bare,
				100*benchkit.Median(r.deliveries)/bare, 100*benchkit.Median(row.perSecs())/bare)
			rate.state = api.atLeast(1)
			if r.dests < aimAPIDests {
				rate.state = notMet
			}
		}
	}
	return []aim{creates, first, restart, rss, rate}
}
