package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/awstest"
)

// The bench (`loadtest bench`, run by scripts/bench.sh): runBench reads the flags and
// the rows, starts the bench's STS and bus, runs every row in its sittings and prints
// the aims table and the report (benchreport.go, with verdict.go's and history.go's
// verdicts). Its parts, a file each: the rows and -runs (benchrows.go), one sitting of
// a row (benchsitting.go), one timed repetition (benchtimed.go), the bare path each
// repetition is paired with (barepath.go), what a row records (benchresults.go), the
// processes' CPU (benchcpu.go) and Redis's memory (benchmemory.go).

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
	fs.DurationVar(&e.idleMany, "idle-many", 2*time.Minute, "the same for the 100,000-destination row (an idle aim's): the garbage collection of its heap the runtime makes every 2 minutes when nothing else starts one falls in it once, at its share (a minute held it or not, and its verdict went with that)")
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

func mustRedisOpts(u string) *redis.Options {
	o, err := redis.ParseURL(u)
	if err != nil {
		panic(err)
	}
	return o
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
