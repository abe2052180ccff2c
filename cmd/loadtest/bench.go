package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/benchkit"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
)

// defaultRuns are the rows the aims are judged on, and no other: one destination at
// 200/s and at 2,000/s (the latency rows) and as fast as confirmed, ingest alone (0
// destinations: the Redis CPU and memory per ingested event), one and two destinations
// with 10,000 deliveries (issue 30's memory rows), 100, 1,000 and 10,000 destinations,
// 100,000 on one replica. The fifth field is the least number of pairs (a run of the
// relay, then one of its bare path) a row runs, the sixth the most it may run until its
// verdicts settle (maxRepeats gives it when unset): 5 up to 13 for one destination as
// fast as confirmed and at 2,000/s; 5 up to 9 at 200/s (7.5 s a run, hence 1,500 events;
// its CPU verdict was NOT met by 9% or more at 13 pairs in every run, its p99 unsure at
// any count); 24 up to 28 for 1,000 and 10,000 destinations, whose estimate lies within
// 20% of the target in every run and whose interval at 13 pairs (±12–14%) brought its
// lower end within 1% of it (5 s and 9 s a pair); 5 for 100 destinations (no aim); 3 for
// the ingest row (no bare path); 4 for 100,000 destinations, whose relay takes a minute
// to start (two in each sitting); 1 for the memory rows, whose figures are one delta
// each. Then the rows with the bus late (lateRuns, late.go), 5 runs each of 3 to 6 s.
// The whole run stays under 30 minutes.
const defaultRuns = "1:1500:200:1024:5:9,1:10000:2000:1024:5,1:2000:0:1024:5,0:20000:0:1024:3,1:10000:0:1024:1,2:10000:0:1024:1,100:200:0:1024:5,1000:20:0:1024:24:28,10000:3:0:1024:24:28,100000:1:0:1024:4," + lateRuns

func parseRun(spec string) (benchRun, error) {
	r, late, delayed, err := parseLate(spec)
	if err != nil {
		return benchRun{}, err
	}
	p := strings.Split(r, ":")
	if len(p) < 3 || len(p) > 6 {
		return benchRun{}, fmt.Errorf("-runs %q: want destinations:events:rate[:bytes[:repeats[:most]]][@delay] (0 destinations: ingest alone)", r)
	}
	n := []int{0, 0, 0, 1024, 1, 0}
	for i, f := range p {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 || (v == 0 && i != 0 && i != 2) {
			return benchRun{}, fmt.Errorf("-runs %q: %q is not a positive number", r, f)
		}
		n[i] = v
	}
	if len(p) == 6 && n[5] < n[4] {
		return benchRun{}, fmt.Errorf("-runs %q: the most pairs (%d) is fewer than the least (%d)", r, n[5], n[4])
	}
	if delayed && n[0] == 0 {
		return benchRun{}, fmt.Errorf("-runs %q: the ingest row has no bus to be late", spec)
	}
	return benchRun{dests: n[0], events: n[1], rate: n[2], size: n[3], repeats: n[4], most: n[5], late: late, delayed: delayed}, nil
}

// parseRuns reads -runs: rows separated by commas; "late" stands for lateRuns.
func parseRuns(s string) ([]benchRun, error) {
	var runs []benchRun
	for _, r := range strings.Split(s, ",") {
		if r == "" {
			continue
		}
		if r == "late" {
			late, err := parseRuns(lateRuns)
			if err != nil {
				return nil, err
			}
			runs = append(runs, late...)
			continue
		}
		br, err := parseRun(r)
		if err != nil {
			return nil, err
		}
		runs = append(runs, br)
	}
	return runs, nil
}

type benchRun struct {
	dests, events, rate int    // dests 0: ingest alone; rate 0: publish as fast as confirms allow
	size                int    // event body bytes
	repeats             int    // timed repetitions in one relay process (and as many of its bare path)
	most                int    // the most repetitions it may run until its verdicts settle; 0: maxRepeats's rule
	cluster             bool   // on the Redis Cluster of -cluster-redis, not the server of -redis
	baseline            string // not "": the -baseline-relay binary (built at this rev) runs the row
	// delayed: the relay writes to the bus through a delay proxy that holds each answer
	// late (0: through the proxy, at once); late.go.
	late    time.Duration
	delayed bool
}

// ingestOnly is the row of no destination: the relay ingests into the account's log and
// nothing reads it, so what Redis spends is ingest's alone.
func (r benchRun) ingestOnly() bool { return r.dests == 0 }

// memoryRow is a row after which Redis memory is read for issue 30's aims: one
// destination with at least aimMemDeliveries deliveries in one run, or two (the
// fan-out: their outcomes meet in the account's channel), published as fast as
// confirmed (a paced row is a latency row). One run's events, not all its runs':
// the one-destination throughput row (1:2000:0, 5 pairs or more) adds up to as many
// and is no memory row.
func (r benchRun) memoryRow() bool {
	return (r.dests == 1 || r.dests == 2) && r.rate == 0 && r.events >= aimMemDeliveries && !r.delayed
}

// Sittings. A row of two or more pairs runs them in two sittings: the first half of
// them while the bench goes over every row once, the rest (and any more it needs to
// settle) in a second pass over the rows, each sitting on a relay and a bare path of
// its own, started afresh on an emptied Redis. A row's interval then holds pairs some
// minutes apart, on two relay processes, so it samples what drifts over a run (the
// machine, a process's heap and threads) instead of one stretch of it. (Two full runs at
// 033d9a4, each row's pairs back to back, differed on 4 of 25 verdicts, each because the
// figure moved between the runs by more than either run's interval.)

// sitting is one sitting of a row: idx names its exchange, config, roles
// and buses (the row's index in the first sitting, past every row's in the second);
// upto is how many pairs the row has when it ends, at most.
type sitting struct {
	row, idx int
	first    bool
	upto     int
}

// sittings is how many sittings row r runs in: two when it has two or more pairs.
func (r benchRun) sittings() int {
	if r.repeats >= 2 {
		return 2
	}
	return 1
}

// firstSitting and secondSitting are row i's of n rows.
func (r benchRun) firstSitting(i int) sitting {
	s := sitting{row: i, idx: i, first: true, upto: r.maxRepeats()}
	if r.sittings() == 2 {
		s.upto = (r.repeats + 1) / 2
	}
	return s
}

func (r benchRun) secondSitting(i, n int) sitting {
	return sitting{row: i, idx: n + i, upto: r.maxRepeats()}
}

// latencies are publish-to-bus-answer times, sorted.
type latencies []time.Duration

func (l latencies) at(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(int(float64(len(l))*q), len(l)-1)]
}

func sortDurations(l latencies) { slices.Sort(l) }

// benchResult is one row: one relay process, its warm-up and idle window, then its
// timed repetitions, each followed by a repetition of its bare path.
type benchResult struct {
	benchRun
	reps                 []repResult
	dups                 int
	rssIdle, rssEnd, hwm int           // kB
	startup              time.Duration // relay start → every destination has the warm-up event
	bareTime             time.Duration // the bare path's set-up (sessions, clients, warm-up), once the relay is warm
	idleFor              time.Duration
	idleCPU              []masterCPU   // per Redis master, over idleFor after the warm-up, nothing published
	idleRelayCPU         time.Duration // the relay process over the same window
	// A memory row's used_memory (every master) before its first timed repetition and
	// once its destination has committed the last, and then what the destination holds.
	memBefore, memAfter int64
	destMemory          []keyMemory
	earlier             history // earlier runs' estimates of the figures judged on it (-history)
	err                 string
}

// keyMemory is one key's MEMORY USAGE, times the share of it a destination carries;
// perEvent, for a stream, its MEMORY USAGE over what it holds (what one attempt line or
// one channel event costs while it is kept): an attempt log's lines (XLEN); a channel's
// events, which its entries stand for (a run is one entry for many: internal/store
// lua.go), from its first entry's sequence to its counter, at most the channel's count
// bound.
type keyMemory struct {
	key      string
	bytes    float64
	perEvent float64
}

// repResult is one timed repetition: E events published, until every destination has
// them (the ingest row: until the account's log holds them); the CPU of each process
// over the same span.
type repResult struct {
	perSec    float64 // deliveries/s (the ingest row: events stored/s)
	lat       latencies
	redisCPU  []masterCPU   // per Redis master
	relayCPU  time.Duration // the relay process (/proc/PID/stat)
	loadCPU   time.Duration // this process: the publisher
	busCPU    time.Duration // the `loadtest bus` process: the sandbox EventBridge
	rabbitCPU time.Duration // the broker (-rabbit-pid), 0 when not given
	bare      *bareResult   // the bare path's repetition of the same index
	memGrowth int64         // the ingest row: used_memory once the log holds the events, less before the first publish
	dedupSize int64         // the ingest row: MEMORY USAGE of the account's dedup keys once the log holds the events
	logLen    int64         // the ingest row: the log's length then (the markers' count)
	// assumeCalls is how many AssumeRole calls STS answered meanwhile: each reads the
	// role's ExternalId from Redis (RequireExternalIDOf), a cost that is the bench's own.
	assumeCalls int
}

// masterCPU is the CPU time (used_cpu_user + used_cpu_sys of INFO cpu) one Redis master
// spent over a timed span.
type masterCPU struct {
	addr string
	cpu  time.Duration
}

// bareResult is one repetition of a row's bare path: the bare pipeline for one
// destination, the bare fan-out for many.
type bareResult struct {
	perSec    float64
	lat       latencies     // the bare pipeline's publish-to-bus latencies (none for the fan-out)
	loadCPU   time.Duration // this process: publisher and consumer, or the fan-out's writers
	busCPU    time.Duration // the bus process
	rabbitCPU time.Duration
	err       string
}

// redisTotal is the CPU of every master of rep together.
func (rep repResult) redisTotal() time.Duration {
	var t time.Duration
	for _, m := range rep.redisCPU {
		t += m.cpu
	}
	return t
}

// benchEnv is what every row shares: the peers, the sandbox cloud, the signing key.
type benchEnv struct {
	stateDir, amqpURL, stsURL string
	relayBin, baselineBin     string
	rabbitPID                 int
	idleFor, idleLeased       time.Duration
	idleMany                  time.Duration // the 100,000-destination row's idle window
	sts                       *awstest.STS
	stsCalls                  atomic.Int64 // requests STS answered so far
	bus                       *remoteBus
	key                       []byte
}

// The bus ARNs of row idx: the relay's destinations, the bare fan-out's writers, the
// bare pipeline. Each prefix ends in "-" so that row 1's never matches row 10's.
func relayBusPrefix(idx int) string {
	return fmt.Sprintf("arn:aws:events:us-east-1:111122223333:event-bus/bench-%d-", idx)
}
func fanOutBusPrefix(idx int) string {
	return fmt.Sprintf("arn:aws:events:us-east-1:111122223333:event-bus/bench-fanout-%d-", idx)
}
func bareBusARN(idx int) string {
	return fmt.Sprintf("arn:aws:events:us-east-1:111122223333:event-bus/bench-bare-%d-", idx)
}

func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	var e benchEnv
	var redisURL, runsFlag, clusterURL, clusterRuns, baselineRuns, aimsOut, historyPath, commit string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&e.relayBin, "relay", "", "relay binary")
	fs.StringVar(&e.stateDir, "state", "", "directory for configs and logs")
	fs.StringVar(&e.amqpURL, "amqp", "", "broker URL (127.0.0.1)")
	fs.StringVar(&redisURL, "redis", "", "Redis URL (127.0.0.1); FLUSHALL before each run")
	fs.StringVar(&runsFlag, "runs", defaultRuns,
		"runs as destinations:events:rate[:bytes[:repeats[:most]]][@delay] (destinations 0 = ingest alone; rate 0 = as fast as confirms allow; bytes default 1024, repeats (the least pairs) 1, most: until settled, by the row's rule; @100ms: the bus answers that late, through a delay proxy, @0s through it at once, judged on deliveries/s, no bare path); \"late\": the rows with the bus late ("+lateRuns+")")
	fs.StringVar(&clusterURL, "cluster-redis", "", "Redis Cluster URL (redis://node?addr=node…, 127.0.0.1) for the -cluster-runs rows; FLUSHALL on every master before each")
	fs.StringVar(&clusterRuns, "cluster-runs", "1000:20:0:1024:5", "rows run on -cluster-redis after the others, as -runs")
	fs.StringVar(&e.baselineBin, "baseline-relay", "", "an older relay binary (the baseline) that runs the -baseline-runs rows too, in the same run")
	fs.StringVar(&baselineRuns, "baseline-runs", "1000:20:0:1024:5", "rows the -baseline-relay runs on -redis, as -runs")
	fs.StringVar(&historyPath, "history", "", "earlier runs' estimates (docs/bench-history.tsv: the CPU aims', the cluster's, Redis's, p99's): each such aim's interval is at least as wide as they spread; none: each run's own pairs alone")
	fs.StringVar(&commit, "commit", "?", "the commit under test, for the report's history lines")
	fs.StringVar(&aimsOut, "aims-out", "", "write the aims table to this file instead of stdout (scripts/bench.sh puts it first)")
	fs.IntVar(&e.rabbitPID, "rabbit-pid", 0, "the broker's pid, to report its CPU per delivery")
	fs.DurationVar(&e.idleFor, "idle", 5*time.Second, "per row, how long Redis and relay CPU are read with nothing published, after the warm-up")
	fs.DurationVar(&e.idleLeased, "idle-leased", 15*time.Second, "the same for the 10,000-destination row (an idle aim's): a whole lease_ttl, so every lease renewal falls inside")
	fs.DurationVar(&e.idleMany, "idle-many", time.Minute, "the same for the 100,000-destination row (an idle aim's): long enough that the one garbage collection of its heap the runtime makes every 2 minutes when nothing else starts one is counted at its share of the window, not the whole of a short one")
	baselineLabel := fs.String("baseline-label", "baseline", "what -baseline-relay is (its git rev), for the report")
	apiDests := fs.Int("api", 0, "after the rows, make this many destinations through the API (issue 31's rows); 0: none")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := loopback("amqp", e.amqpURL); err != nil {
		return err
	}
	if err := loopback("redis", redisURL); err != nil {
		return err
	}
	runs, err := parseRuns(runsFlag)
	if err != nil {
		return err
	}
	if e.baselineBin != "" {
		brs, err := parseRuns(baselineRuns)
		if err != nil {
			return err
		}
		for _, br := range brs {
			br.baseline = *baselineLabel
			runs = append(runs, br)
		}
	}
	var cluster *redis.ClusterClient
	if clusterURL != "" {
		if err := loopback("cluster-redis", clusterURL); err != nil {
			return err
		}
		o, err := redis.ParseClusterURL(clusterURL)
		if err != nil {
			return fmt.Errorf("-cluster-redis: %w", err)
		}
		cluster = redis.NewClusterClient(o)
		defer cluster.Close()
		crs, err := parseRuns(clusterRuns)
		if err != nil {
			return err
		}
		for _, br := range crs {
			br.cluster = true
			runs = append(runs, br)
		}
	}

	// The cloud: STS trusting each role's own ExternalId (in this process: it only works
	// at setup), the stamped EventBridge in a process of its own.
	e.sts = awstest.NewSTSHandler()
	// A run makes about two million AssumeRole calls (a probe and a session for each
	// destination the relays and the bare paths set up, the API rows' most of all), and
	// STS kept each, with its session, in ~1.3 KB of this process's heap: GBs by the API
	// rows, in the process whose CPU is the bare fan-out's writers' and which runs the
	// bare restart. The bench counts them (stsCalls) and needs none kept.
	e.sts.ForgetRequests()
	var closeSTS func()
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.stsCalls.Add(1); e.sts.ServeHTTP(w, r) })
	if e.stsURL, closeSTS, err = serveLoopback(counted); err != nil {
		return err
	}
	defer closeSTS()
	if e.bus, err = startBus(filepath.Join(e.stateDir, "bus.log")); err != nil {
		return err
	}
	defer func() {
		// What the bus held at its peak: it keeps each entry's stamp, not the entry.
		_, hwm := procStatus(e.bus.pid())
		logf("the bus: peak RSS %d MiB", hwm/1024)
		e.bus.close()
	}()
	e.key = make([]byte, 32)
	for i := range e.key {
		e.key[i] = byte(i*5 + 3)
	}

	load := loadAvg()
	rdb := redis.NewClient(mustRedisOpts(redisURL))
	defer rdb.Close()
	results := make([]benchResult, len(runs))
	if historyPath != "" {
		h, err := readHistory(historyPath)
		if err != nil {
			return err
		}
		for i, r := range runs {
			results[i].earlier = h.earlierOf(r)
		}
	}
	started := time.Now()
	sit := func(r benchRun, s sitting) {
		t0 := time.Now()
		res := &results[s.row]
		if r.cluster {
			e.benchOne(ctx, r, s, clusterURL, cluster, res)
		} else {
			e.benchOne(ctx, r, s, redisURL, rdb, res)
		}
		if res.err != "" {
			logf("run %d (%d destinations) failed: %s", s.row+1, r.dests, res.err)
		}
		which := "second"
		if s.first {
			which = "first"
		}
		logf("run %d (%d destinations), %s of %d sittings: %s in all, %d runs so far", s.row+1, r.dests, which, r.sittings(),
			time.Since(t0).Round(time.Second), len(res.reps))
	}
	for i, r := range runs {
		sit(r, r.firstSitting(i))
	}
	for i, r := range runs {
		if r.sittings() == 2 && results[i].err == "" {
			sit(r, r.secondSitting(i, len(runs)))
		}
	}
	var apiRes *apiResult
	if *apiDests > 0 {
		t0 := time.Now()
		r := e.apiRow(ctx, redisURL, rdb, *apiDests)
		if r.err != "" {
			logf("the API rows failed: %s", r.err)
		}
		logf("the API rows: %s in all", time.Since(t0).Round(time.Second))
		apiRes = &r
	}
	loadAfter := loadAvg()

	aims := aimsTable(append(append(judgeAims(results), lateAims(results)...), apiAims(apiRes, results)...)) + issue17Line(results)
	if aimsOut == "" {
		fmt.Fprint(stdout, aims)
	} else if err := os.WriteFile(aimsOut, []byte(aims), 0o644); err != nil {
		return err
	}
	fmt.Fprint(stdout, benchReport(results, load, loadAfter, commit, started))
	return nil
}

// barePath is a row's bare path, set up once the row's relay is warm and its idle cost
// read: run is one repetition of it, run right after each of the relay's (ABAB…), so
// that both see the machine as it is at that moment.
type barePath interface {
	run(ctx context.Context) *bareResult
	close()
}

// newBarePath sets up row r's bare path: the bare pipeline for one destination, the bare
// fan-out for many, none (nil) for ingest.
func (e *benchEnv) newBarePath(ctx context.Context, r benchRun, idx int) (barePath, error) {
	switch {
	case r.ingestOnly(), r.delayed: // a late row is judged against its bound, not a bare path
		return nil, nil
	case r.dests == 1:
		p, err := newBarePipeline(ctx, r, idx, e.amqpURL, e.key, e.bus, e.rabbitPID)
		if err != nil {
			return nil, fmt.Errorf("bare pipeline: %w", err)
		}
		return p, nil
	}
	f, err := newFanOut(ctx, r, idx, e.stsURL, e.sts, e.bus, e.key)
	if err != nil {
		return nil, fmt.Errorf("bare fan-out: %w", err)
	}
	return &fanOutPath{f: f, r: r, key: e.key, bus: e.bus}, nil
}

// fanOutPath is the bare fan-out as a row's bare path: each repetition the row's events
// to every destination's bus.
type fanOutPath struct {
	f   *fanOut
	r   benchRun
	key []byte
	bus *remoteBus
}

func (p *fanOutPath) run(ctx context.Context) *bareResult {
	evs := make([]*event, p.r.events)
	for i := range evs {
		evs[i] = sizedEvent("bench.fanout", p.key, i+1, p.r.size)
	}
	return p.f.run(ctx, evs, p.bus)
}

func (p *fanOutPath) close() { p.f.close() }

// benchLogKey is the bench account's log (internal/store keys.go: relay:{acct}:log): the
// ingest row counts what the relay stored there.
var benchLogKey = storetest.LogKey("acct_bench")

// benchRole is the role of row idx's destination i: one role per destination, one
// trust policy per role.
const benchRole = "arn:aws:iam::111122223333:role/bench-delivery-%d-%d"

// benchOne runs sitting s of row r into res on one `relay serve` (the baseline binary
// for a baseline row) against rdb at redisURL. Its steps: a relay started on an empty
// Redis, warmed up, its idle cost measured (the first sitting), then the row's bare path
// set up, then the timed repetitions, each of the relay's followed by one of the bare
// path's. The first sitting's start-up, idle and RSS at rest are the row's.
func (e *benchEnv) benchOne(ctx context.Context, r benchRun, s sitting, redisURL string, rdb redis.UniversalClient, res *benchResult) {
	res.benchRun = r
	idx := s.idx
	if err := forEachMaster(ctx, rdb, func(ctx context.Context, m *redis.Client) error { return m.FlushAll(ctx).Err() }); err != nil {
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
	pub.send(ctx, []*event{warm})
	if r.ingestOnly() {
		if !waitLogLen(ctx, rdb, 1, time.Minute) {
			return "warm-up: the account's log did not get the first event within a minute"
		}
		return ""
	}
	base := e.bus.count()
	if !waitCount(ctx, e.bus, base, r.dests, 300*time.Second) {
		return fmt.Sprintf("warm-up: %d of %d destinations got the first event, then none for 300 s", e.bus.count()-base, r.dests)
	}
	return ""
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
	sleepUntil(ctx, idleStart.Add(idleFor))
	idle1, err := redisCPU(ctx, rdb)
	if err != nil {
		return "INFO cpu: " + err.Error()
	}
	res.idleRelayCPU = procCPU(rep.pid()) - relay0
	res.idleFor = time.Since(idleStart)
	for _, addr := range slices.Sorted(maps.Keys(idle1)) {
		res.idleCPU = append(res.idleCPU, masterCPU{addr, idle1[addr] - idle0[addr]})
	}
	return ""
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

// failedBare is a bare path that could not be set up: each repetition says why.
type failedBare string

func (f failedBare) run(context.Context) *bareResult { return &bareResult{err: string(f)} }
func (failedBare) close()                            {}

// readMemory reads, after a memory row's repetitions, used_memory once its destinations
// have committed their last delivery, and what each of the destination's keys holds.
func readMemory(ctx context.Context, res *benchResult, rdb redis.UniversalClient) string {
	for i := range res.dests {
		if !waitCommitted(ctx, rdb, "d"+strconv.Itoa(i), 10*time.Second) {
			return "memory: the destination's cursor did not reach the log's last entry within 10 s"
		}
	}
	var err error
	if res.memAfter, err = usedMemory(ctx, rdb); err != nil {
		return "INFO memory: " + err.Error()
	}
	if res.destMemory, err = destinationMemory(ctx, rdb, "acct_bench", "d0", res.dests); err != nil {
		return "MEMORY USAGE: " + err.Error()
	}
	return ""
}

// waitCommitted waits until destination id's cursor (its card's cursor field) is the
// bench account's last log entry: what it delivered is committed, attempts and channel
// events written.
func waitCommitted(ctx context.Context, rdb redis.UniversalClient, id string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		last, err := rdb.XRevRangeN(ctx, benchLogKey, "+", "-", 1).Result()
		if err == nil && len(last) == 1 && rdb.HGet(ctx, storetest.DestKey("acct_bench", id), "cursor").Val() == last[0].ID {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// usedMemory is used_memory of INFO memory, summed over every master, in bytes.
func usedMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	var total atomic.Int64
	err := forEachMaster(ctx, rdb, func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return fmt.Errorf("used_memory %q", v)
				}
				total.Add(n)
				return nil
			}
		}
		return fmt.Errorf("%s: no used_memory", m.Options().Addr)
	})
	return total.Load(), err
}

// destinationMemory is what destination id of acct (of dests destinations) holds in
// Redis: MEMORY USAGE … SAMPLES 0 (every element counted) of each key of the account
// that destKeyShare gives it a share of, times that share. One SCAN of the account's
// keys on every master.
func destinationMemory(ctx context.Context, rdb redis.UniversalClient, acct, id string, dests int) ([]keyMemory, error) {
	var mu sync.Mutex
	var out []keyMemory
	err := forEachMaster(ctx, rdb, func(ctx context.Context, m *redis.Client) error {
		iter := m.Scan(ctx, 0, storetest.AccountPattern(acct), 1000).Iterator()
		for iter.Next(ctx) {
			share := destKeyShare(iter.Val(), acct, id, dests)
			if share == 0 {
				continue
			}
			n, err := m.MemoryUsage(ctx, iter.Val(), 0).Result()
			if err != nil {
				return fmt.Errorf("%s: %w", iter.Val(), err)
			}
			km := keyMemory{key: iter.Val(), bytes: share * float64(n)}
			if t, err := m.Type(ctx, km.key).Result(); err == nil && t == "stream" {
				if held := streamHolds(ctx, m, km.key); held > 0 {
					km.perEvent = float64(n) / float64(held)
				}
			}
			mu.Lock()
			out = append(out, km)
			mu.Unlock()
		}
		return iter.Err()
	})
	slices.SortFunc(out, func(a, b keyMemory) int { return cmp.Compare(b.bytes, a.bytes) })
	return out, err
}

// streamHolds is how many attempt lines or channel events stream key holds (keyMemory),
// 0 when it cannot tell.
func streamHolds(ctx context.Context, m *redis.Client, key string) int64 {
	if !strings.Contains(key, ":chan:") {
		n, _ := m.XLen(ctx, key).Result()
		return n
	}
	first, err := m.XRangeN(ctx, key, "-", "+", 1).Result()
	last, err2 := m.Get(ctx, key+":seq").Int64()
	if err != nil || err2 != nil || len(first) == 0 {
		return 0
	}
	from, _ := strconv.ParseInt(strings.SplitN(first[0].ID, "-", 2)[0], 10, 64)
	return min(last-from+1, int64(store.DefaultBounds.ChannelEvents))
}

// keysMemory is MEMORY USAGE … SAMPLES 0 summed over the keys matching pattern, on
// every master.
func keysMemory(ctx context.Context, rdb redis.UniversalClient, pattern string) (int64, error) {
	var total atomic.Int64
	err := forEachMaster(ctx, rdb, func(ctx context.Context, m *redis.Client) error {
		iter := m.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			n, err := m.MemoryUsage(ctx, iter.Val(), 0).Result()
			if err != nil {
				return fmt.Errorf("%s: %w", iter.Val(), err)
			}
			total.Add(n)
		}
		return iter.Err()
	})
	return total.Load(), err
}

// destKeyShare is the share of key that destination id of acct carries when the account
// has dests destinations (internal/store keys.go): all of every key named after it (its
// card, lease, attempts, retries, its channel and the channel's counter), 1/dests of
// the account's channel and its counter, none of the rest.
func destKeyShare(key, acct, id string, dests int) float64 {
	prefix := storetest.AccountPrefix(acct)
	switch {
	case !strings.HasPrefix(key, prefix):
		return 0
	case strings.HasSuffix(key, ":"+id), strings.HasSuffix(key, ":destination:"+id+":seq"):
		return 1
	case key == prefix+"chan:account:"+acct, key == prefix+"chan:account:"+acct+":seq":
		return 1 / float64(max(dests, 1))
	}
	return 0
}

// spans is the CPU of every process read at the start and the end of a timed span.
type spans struct {
	redis                    map[string]time.Duration
	relay, load, bus, rabbit time.Duration
}

func (e *benchEnv) readSpans(ctx context.Context, rdb redis.UniversalClient, relayPID int) (spans, error) {
	s := spans{relay: procCPU(relayPID), load: benchkit.SelfCPU(), bus: procCPU(e.bus.pid()), rabbit: procCPU(e.rabbitPID)}
	var err error
	s.redis, err = redisCPU(ctx, rdb)
	return s, err
}

// fill sets one's CPU figures to what each process spent between s0 and s1.
func (s1 spans) fill(s0 spans, one *repResult) {
	one.relayCPU, one.loadCPU, one.busCPU, one.rabbitCPU = s1.relay-s0.relay, s1.load-s0.load, s1.bus-s0.bus, s1.rabbit-s0.rabbit
	for _, addr := range slices.Sorted(maps.Keys(s1.redis)) {
		one.redisCPU = append(one.redisCPU, masterCPU{addr, s1.redis[addr] - s0.redis[addr]})
	}
}

// timed is one repetition: evs published at the row's rate until every destination
// has them all, and what each process spent meanwhile.
func (e *benchEnv) timed(ctx context.Context, r benchRun, idx, relayPID int, pub *publisher, rdb redis.UniversalClient, evs []*event) (repResult, string) {
	var one repResult
	base := e.bus.count()
	s0, err := e.readSpans(ctx, rdb, relayPID)
	if err != nil {
		return one, "INFO cpu: " + err.Error()
	}
	assumed := e.stsCalls.Load()
	start := time.Now()
	publishAt(ctx, pub, evs, r.rate)
	want := r.dests * len(evs)
	const stall = time.Minute
	if !waitCount(ctx, e.bus, base, want, stall) {
		return one, fmt.Sprintf("%d of %d deliveries, then none for %s", e.bus.count()-base, want, stall)
	}
	s1, err := e.readSpans(ctx, rdb, relayPID)
	if err != nil {
		return one, "INFO cpu: " + err.Error()
	}
	s1.fill(s0, &one)
	one.assumeCalls = int(e.stsCalls.Load() - assumed)
	var last time.Time
	if one.lat, last, err = e.bus.latencies(evs, relayBusPrefix(idx)); err != nil {
		return one, err.Error()
	}
	one.perSec = float64(want) / last.Sub(start).Seconds()
	return one, ""
}

// timedIngest is one repetition of the ingest row: evs published as fast as confirms
// allow until the account's log holds them all, and what each process spent meanwhile.
// Nothing reads the log (no destination), so Redis's CPU is ingest's.
func (e *benchEnv) timedIngest(ctx context.Context, r benchRun, k, relayPID int, pub *publisher, rdb redis.UniversalClient, evs []*event) (repResult, string) {
	var one repResult
	mem0, err := usedMemory(ctx, rdb)
	if err != nil {
		return one, "INFO memory: " + err.Error()
	}
	s0, err := e.readSpans(ctx, rdb, relayPID)
	if err != nil {
		return one, "INFO cpu: " + err.Error()
	}
	start := time.Now()
	publishAt(ctx, pub, evs, r.rate)
	want := int64(1 + (k+1)*len(evs)) // the warm-up event, then every repetition's
	if !waitLogLen(ctx, rdb, want, time.Minute) {
		n, _ := rdb.XLen(ctx, benchLogKey).Result()
		return one, fmt.Sprintf("the account's log holds %d of %d events, then none more for a minute", n, want)
	}
	elapsed := time.Since(start)
	s1, err := e.readSpans(ctx, rdb, relayPID)
	if err != nil {
		return one, "INFO cpu: " + err.Error()
	}
	s1.fill(s0, &one)
	one.perSec = float64(len(evs)) / elapsed.Seconds()
	// Each event's log entry, dedup marker and index entry are one transaction: the
	// log's length says all three are in.
	mem1, err := usedMemory(ctx, rdb)
	if err != nil {
		return one, "INFO memory: " + err.Error()
	}
	one.memGrowth = mem1 - mem0
	// The markers' share: they are kept for the dedup window, the log for the replay window.
	if one.dedupSize, err = keysMemory(ctx, rdb, storetest.DedupKey("acct_bench")+"*"); err != nil {
		return one, "MEMORY USAGE: " + err.Error()
	}
	if one.logLen, err = rdb.XLen(ctx, benchLogKey).Result(); err != nil {
		return one, "XLEN: " + err.Error()
	}
	return one, ""
}

// waitLogLen waits until the bench account's log holds want entries, polling XLEN every
// 5 ms (a few µs of Redis each), and gives up when it grows by none for stall.
func waitLogLen(ctx context.Context, rdb redis.UniversalClient, want int64, stall time.Duration) bool {
	var seen int64
	deadline := time.Now().Add(stall)
	for {
		n, err := rdb.XLen(ctx, benchLogKey).Result()
		if err == nil && n >= want {
			return true
		}
		if n > seen {
			seen, deadline = n, time.Now().Add(stall)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func baselineNote(r benchRun) string {
	if r.baseline == "" {
		return ""
	}
	return "relay at " + r.baseline + ": "
}

// publishAt publishes evs with confirms: at rate events/s, or as fast as confirms allow
// (256 at a time) when rate is 0.
func publishAt(ctx context.Context, pub *publisher, evs []*event, rate int) {
	if rate <= 0 {
		for i := 0; i < len(evs); i += 256 {
			pub.send(ctx, evs[i:min(i+256, len(evs))])
		}
		return
	}
	start := time.Now()
	sent := 0
	for sent < len(evs) && ctx.Err() == nil {
		due := min(int(time.Since(start).Seconds()*float64(rate))+1, len(evs))
		if due > sent {
			pub.send(ctx, evs[sent:due])
			sent = due
		}
		time.Sleep(time.Millisecond)
	}
}

// sizedEvent is a job.completed event whose body is padded to size bytes.
func sizedEvent(exchange string, key []byte, seq, size int) *event {
	now := time.Now()
	j := jobevent.Job{ID: uuid(), Status: "completed", StoreID: fmt.Sprintf("store-%d", seq%50)}
	j.Body, _ = jobevent.Pad(j.DefaultBody(now), size) // a default body always has metadata
	return &event{id: j.EventID(), key: j.RoutingKey(), msg: jobevent.Build(j, exchange, key, now)}
}

// waitCount waits until the bus has taken want entries more than base, and gives up
// when it takes none for stall: a slow machine slows a row, a stuck relay ends it.
func waitCount(ctx context.Context, bus *remoteBus, base, want int, stall time.Duration) bool {
	seen, deadline := bus.count(), time.Now().Add(stall)
	for seen-base < want {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		if n := bus.countAtLeast(base + want).N; n > seen { // answers within a second
			seen, deadline = n, time.Now().Add(stall)
		}
	}
	return true
}

func serveLoopback(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// forEachMaster runs fn on the one server, or on every master of a cluster.
func forEachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, fn)
	}
	return fn(ctx, rdb.(*redis.Client))
}

// redisCPU reads INFO cpu on every master: used_cpu_user + used_cpu_sys, by address.
func redisCPU(ctx context.Context, rdb redis.UniversalClient) (map[string]time.Duration, error) {
	var mu sync.Mutex
	out := map[string]time.Duration{}
	err := forEachMaster(ctx, rdb, func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		var sec float64
		for _, line := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return fmt.Errorf("INFO cpu %s: %q", k, v)
				}
				sec += f
			}
		}
		mu.Lock()
		out[m.Options().Addr] = time.Duration(sec * float64(time.Second))
		mu.Unlock()
		return nil
	})
	return out, err
}

func mustRedisOpts(u string) *redis.Options {
	o, err := redis.ParseURL(u)
	if err != nil {
		panic(err)
	}
	return o
}

// procStatus reads VmRSS and VmHWM (kB) of pid.
func procStatus(pid int) (rss, hwm int) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "VmRSS:" {
			rss, _ = strconv.Atoi(f[1])
		}
		if len(f) >= 2 && f[0] == "VmHWM:" {
			hwm, _ = strconv.Atoi(f[1])
		}
	}
	return
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func nproc() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(10 * time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// trustStored has role trust the ExternalId the destination hash key holds, read from
// Redis when the role is first assumed (the relay stores it when the destination is
// added): the customer copying it from the card.
func (e *benchEnv) trustStored(ctx context.Context, rdb redis.UniversalClient, role, key string) {
	var mu sync.Mutex
	var ext string // once stored, an ExternalId never changes: read Redis until it is
	e.sts.RequireExternalIDOf(role, func() string {
		mu.Lock()
		defer mu.Unlock()
		if ext == "" {
			ext = rdb.HGet(ctx, key, "external_id").Val()
		}
		return ext
	})
}

// procCPU is process pid's CPU time so far (benchkit.ProcCPU); 0 when it cannot be read.
func procCPU(pid int) time.Duration {
	d, _ := benchkit.ProcCPU(pid)
	return d
}
