package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/upgrade"
)

// One sitting of a row (benchOne): its relay configured and started on an emptied
// Redis, warmed up, its idle cost read, then its timed repetitions, each followed by
// one of its bare path's.

// benchLogKey is the bench account's log (internal/store keys.go: relay:{acct}:log): the
// ingest row counts what the relay stored there.
var benchLogKey = storetest.LogKey("acct_bench")

// benchRole is the role of row idx's destination i: one role per destination, one
// trust policy per role.
const benchRole = "arn:aws:iam::111122223333:role/bench-delivery-%d-%d"

// emptyRedis empties every master for a relay of its own, as a deployment that has
// made its background rewrites' one walk (upgrade.MarkDone): an emptied Redis holds
// nothing to rewrite, and a walk started anew for each relay (500 keys a second over
// every key, a minute or more at 10,000 destinations) is not what its destinations
// cost (at 10,000 idle it took Redis from 0.2% to 0.8% of a core, the relay from 0.1%
// to 1.3%).
func emptyRedis(ctx context.Context, rdb redis.UniversalClient) error {
	if err := forEachMaster(ctx, rdb, func(ctx context.Context, m *redis.Client) error { return m.FlushAll(ctx).Err() }); err != nil {
		return err
	}
	return upgrade.MarkDone(ctx, rdb, upgrade.ReleaseRewrites(nil))
}

// benchOne runs sitting s of row r into res on one `relay serve` (the baseline binary
// for a baseline row) against rdb at redisURL. Its steps: a relay started on an empty
// Redis, warmed up, its idle cost measured (the first sitting), then the row's bare path
// set up, then the timed repetitions, each of the relay's followed by one of the bare
// path's. The first sitting's start-up, idle and RSS at rest are the row's.
func (e *benchEnv) benchOne(ctx context.Context, r benchRun, s sitting, redisURL string, rdb redis.UniversalClient, res *benchResult) {
	res.benchRun = r
	idx := s.idx
	if err := emptyRedis(ctx, rdb); err != nil {
		res.err = err.Error()
		return
	}
	exchange := fmt.Sprintf("bench.%d.%d", idx, time.Now().Unix())
	busURL, closeBus, err := e.startLateBus(r)
	if err != nil {
		res.err = err.Error()
		return
	}
	defer closeBus() // after the relay is stopped
	rep, t0, err := e.startBenchRelay(ctx, r, idx, exchange, redisURL, busURL, rdb)
	if err != nil {
		res.err = err.Error()
		return
	}
	defer rep.kill(syscall.SIGTERM)
	pub := &publisher{urls: []string{e.amqpURL}, exchange: exchange}
	defer pub.close()
	if res.err = e.warmUp(ctx, r, exchange, pub, rdb); res.err != "" {
		return
	}
	startup := time.Since(t0)
	rssIdle, _ := procStatus(rep.pid())
	logf("%d destinations: warm after %s, RSS %d kB", r.dests, startup.Round(time.Millisecond), rssIdle)
	if s.first {
		res.startup, res.rssIdle = startup, rssIdle
		if !r.ingestOnly() && !r.delayed { // no idle aim is read on a late row
			if res.err = e.idleCost(ctx, r, rep, rdb, res); res.err != "" {
				return
			}
		}
	}
	dupBase := e.bus.counts().Dups
	if r.memoryRow() {
		var err error
		if res.memBefore, err = usedMemory(ctx, rdb); err != nil {
			res.err = "INFO memory: " + err.Error()
			return
		}
	}
	t1 := time.Now()
	bare, err := e.newBarePath(ctx, r, idx)
	if s.first {
		res.bareTime = time.Since(t1)
	}
	if err != nil {
		logf("run %d: %s", s.row+1, err)
		bare = failedBare(err.Error())
	}
	if bare != nil {
		defer bare.close()
	}
	if res.err = e.repeat(ctx, r, s, exchange, rep, pub, rdb, bare, res); res.err != "" {
		return
	}
	res.dups += e.bus.counts().Dups - dupBase
	rssEnd, hwm := procStatus(rep.pid())
	res.rssEnd, res.hwm = max(res.rssEnd, rssEnd), max(res.hwm, hwm)
	if r.memoryRow() {
		res.err = readMemory(ctx, res, rdb)
	}
}

// benchConfig is the config of row r's relay: its destinations on the bench's bus (at
// busURL: a late row's delay proxy), each with its own role. STS's budget per account is
// lifted (its default, 60 calls a minute, would take 100,000 destinations hours to
// start); the one per destination stays. A late row's window is written out: the
// default, the one its bound is computed with.
func (e *benchEnv) benchConfig(r benchRun, idx int, exchange, redisURL, busURL string) string {
	inFlight := ""
	if r.delayed {
		inFlight = fmt.Sprintf("\n  in_flight: %d", lateWindow)
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, `identity:
  name: mercamap
  aws_principal_arn: arn:aws:iam::999999999999:role/relay-delivery
  external_id_secret: loadtest-external-id-secret-0123456789abcdef  # ExternalIds derived: serve refuses ids kept only in Redis
rabbitmq: {url: %s, exchange: %s, queue: %s, prefetch: 256}
redis: {url: %q}
signature: {keys: [env:BENCH_HMAC_KEY]}
api: {listen: "127.0.0.1:0", metrics_listen: "127.0.0.1:0"}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s}
  sts_budget: {per_account: {count: 1000000, per: 1m}}
delivery:
  lease_ttl: 15s%s
accounts:
  - {id: acct_bench, tenants: [single-tenant]}
destinations:
`, e.amqpURL, exchange, exchange, redisURL, e.stsURL, busURL, inFlight)
	if r.ingestOnly() {
		cfg.WriteString("  []\n")
	}
	for i := range r.dests {
		bus := fmt.Sprintf("%s%d", relayBusPrefix(idx), i)
		fmt.Fprintf(&cfg, "  - {id: d%d, account: acct_bench, connector: eventbridge, bus_arn: %q, role_arn: %q}\n", i, bus, fmt.Sprintf(benchRole, idx, i))
	}
	return cfg.String()
}

// startBenchRelay writes row r's config, has the customer's side trust each
// destination's ExternalId, and starts the relay, returned once it consumes with the
// time it was started (the row's startup counts from then).
func (e *benchEnv) startBenchRelay(ctx context.Context, r benchRun, idx int, exchange, redisURL, busURL string, rdb redis.UniversalClient) (*replica, time.Time, error) {
	cfgPath := filepath.Join(e.stateDir, fmt.Sprintf("relay.bench.%d.yaml", idx))
	if err := os.WriteFile(cfgPath, []byte(e.benchConfig(r, idx, exchange, redisURL, busURL)), 0o600); err != nil {
		return nil, time.Time{}, err
	}
	// The customer's side: each role trusts its destination's ExternalId, read from Redis
	// when the role is assumed (the relay stores it at startup), so the first setup check
	// passes.
	for i := range r.dests {
		e.trustStored(ctx, rdb, fmt.Sprintf(benchRole, idx, i), storetest.DestKey("acct_bench", fmt.Sprintf("d%d", i)))
	}
	bin := e.relayBin
	if r.baseline != "" {
		bin = e.baselineBin
	}
	rep := &replica{name: fmt.Sprintf("bench-%d", idx), bin: bin, config: cfgPath, logDir: e.stateDir,
		env: []string{"BENCH_HMAC_KEY=" + hex.EncodeToString(e.key), "AWS_ACCESS_KEY_ID=AKIDBENCH",
			"AWS_SECRET_ACCESS_KEY=bench-not-a-secret", "AWS_EC2_METADATA_DISABLED=true"}}
	started := time.Now()
	if err := rep.start(); err != nil {
		return nil, time.Time{}, err
	}
	if err := waitLog(ctx, []*replica{rep}, e.stateDir, `"msg":"consuming"`, 300*time.Second); err != nil {
		rep.kill(syscall.SIGTERM)
		return nil, time.Time{}, err
	}
	return rep, started, nil
}

// warmUp publishes one event and waits until every destination has it (leases taken,
// sessions assumed); the ingest row: until the log holds it. It returns what failed,
// "" for nothing.
func (e *benchEnv) warmUp(ctx context.Context, r benchRun, exchange string, pub *publisher, rdb redis.UniversalClient) string {
	warm := sizedEvent(exchange, e.key, 0, r.size)
	// The bus's count before the publish: the relay may write the event to a destination
	// before the broker confirms it (a confirm waits for the disk), and a count read after
	// would hold that write and wait for one more than there are.
	base := e.bus.count()
	pub.send(ctx, []*event{warm})
	if r.ingestOnly() {
		if !waitLogLen(ctx, rdb, 1, time.Minute) {
			return "warm-up: the account's log did not get the first event within a minute"
		}
		return ""
	}
	if !waitCount(ctx, e.bus, base, r.dests, 300*time.Second) {
		return fmt.Sprintf("warm-up: %d of %d destinations got the first event, then none for 300 s%s", e.bus.count()-base, r.dests, notActive(ctx, rdb, r.dests))
	}
	return ""
}

// notActive says, for a warm-up that did not finish, which destinations' stored state is
// not active and why (their status, pending check and last failure as Redis holds
// them), so a failure says where to look: "" when all are active or Redis cannot say.
func notActive(ctx context.Context, rdb redis.UniversalClient, dests int) string {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, dests)
	for i := range dests {
		cmds[i] = pipe.HMGet(ctx, storetest.DestKey("acct_bench", fmt.Sprintf("d%d", i)), "status", "pending", "last_failure", "cursor")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return ""
	}
	var out []string
	for i, c := range cmds {
		v := c.Val()
		if len(v) == 4 && v[0] == "active" {
			continue
		}
		if len(out) == 3 {
			out = append(out, "…")
			break
		}
		out = append(out, fmt.Sprintf("d%d %q", i, fmt.Sprint(v)))
	}
	if len(out) == 0 {
		return "; every destination's stored status is active"
	}
	return "; not active: " + strings.Join(out, ", ")
}

// idleCost measures what the destinations cost Redis and the relay with nothing to
// deliver (leases renewed, logs watched): a window before the load, a second after the
// warm-up (what the warm-up's deliveries left to commit is committed by then). It
// returns what failed, "" for nothing.
func (e *benchEnv) idleCost(ctx context.Context, r benchRun, rep *replica, rdb redis.UniversalClient, res *benchResult) string {
	idleFor := e.idleFor
	switch r.dests {
	case aimIdleDests:
		idleFor = e.idleLeased
	case aimManyDests:
		idleFor = e.idleMany
	}
	sleepUntil(ctx, time.Now().Add(time.Second))
	idle0, err := redisCPU(ctx, rdb)
	if err != nil {
		return "INFO cpu: " + err.Error()
	}
	relay0 := procCPU(rep.pid())
	idleStart := time.Now()
	// Read again every idleSliceLen, so the verdict has the window's spread (idleSpread).
	var last map[string]time.Duration
	redisAt, relayAt, at := total(idle0), relay0, idleStart
	for end := idleStart.Add(idleFor); at.Before(end); {
		next := at.Add(idleSliceLen)
		if next.After(end) {
			next = end
		}
		sleepUntil(ctx, next)
		if last, err = redisCPU(ctx, rdb); err != nil {
			return "INFO cpu: " + err.Error()
		}
		now, relayNow := time.Now(), procCPU(rep.pid())
		res.idleSlices = append(res.idleSlices, idleSlice{redis: total(last) - redisAt, relay: relayNow - relayAt, took: now.Sub(at)})
		redisAt, relayAt, at = total(last), relayNow, now
	}
	res.idleRelayCPU, res.idleFor = relayAt-relay0, at.Sub(idleStart)
	for _, addr := range slices.Sorted(maps.Keys(last)) {
		res.idleCPU = append(res.idleCPU, masterCPU{addr, last[addr] - idle0[addr]})
	}
	return ""
}

// total is the CPU of every master together.
func total(perMaster map[string]time.Duration) time.Duration {
	var t time.Duration
	for _, d := range perMaster {
		t += d
	}
	return t
}

// repeat runs sitting s of row r's timed repetitions into res.reps, each followed by one
// of the bare path's (none for ingest): up to s.upto pairs in all; past r.repeats, only
// while the row's verdicts are not settled. It returns what failed, "" for nothing.
func (e *benchEnv) repeat(ctx context.Context, r benchRun, s sitting, exchange string, rep *replica, pub *publisher, rdb redis.UniversalClient, bare barePath, res *benchResult) string {
	idx, start := s.idx, len(res.reps)
	for k := start; k < s.upto; k++ {
		if k >= r.repeats && res.settled() {
			break
		}
		evs := make([]*event, r.events)
		for i := range evs {
			evs[i] = sizedEvent(exchange, e.key, k*r.events+i+1, r.size)
		}
		e.bus.forget() // the pairs before this one are read: the bus holds this pair's stamps only
		var one repResult
		var failed string
		if r.ingestOnly() {
			one, failed = e.timedIngest(ctx, r, k-start, rep.pid(), pub, rdb, evs) // the log holds this sitting's
		} else {
			one, failed = e.timed(ctx, r, idx, rep.pid(), pub, rdb, evs)
		}
		if failed != "" {
			return failed
		}
		logf("%s%d destinations × %d events of %d B (%d, at least %d): %.0f/s, p50 %s p99 %s, %d AssumeRole calls", baselineNote(r), r.dests, r.events, r.size,
			k+1, r.repeats, one.perSec, one.lat.at(0.5), one.lat.at(0.99), one.assumeCalls)
		if bare != nil {
			one.bare = bare.run(ctx)
			if one.bare.err != "" {
				logf("run %d.%d: bare path failed: %s", s.row+1, k+1, one.bare.err)
			} else {
				logf("run %d.%d: %s %.0f/s, p50 %s p99 %s (none for the fan-out); whole-system CPU %s against %s", s.row+1, k+1, bareKind(r), one.bare.perSec,
					one.bare.lat.at(0.5), one.bare.lat.at(0.99), one.systemCPU().Round(time.Millisecond), one.bare.systemCPU(r.dests == 1).Round(time.Millisecond))
			}
		}
		res.reps = append(res.reps, one)
	}
	return ""
}
