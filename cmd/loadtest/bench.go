package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
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
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
)

// defaultRuns grows one thing at a time from one destination and 1 KB events at 200/s
// (the latency row): the publish rate, the event size, the number of destinations.
const defaultRuns = "1:2000:200,1:2000:0,1:2000:200:16384,1:1000:100:65536,100:200:0,1000:20:0,10000:10:0"

func parseRun(r string) (benchRun, error) {
	p := strings.Split(r, ":")
	if len(p) != 3 && len(p) != 4 {
		return benchRun{}, fmt.Errorf("-runs %q: want destinations:events:rate[:bytes]", r)
	}
	n := make([]int, 4)
	n[3] = 1024
	for i, f := range p {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 || (v == 0 && i != 2) {
			return benchRun{}, fmt.Errorf("-runs %q: %q is not a positive number", r, f)
		}
		n[i] = v
	}
	return benchRun{dests: n[0], events: n[1], rate: n[2], size: n[3]}, nil
}

// stampedBus is the sandbox's EventBridge (awstest) with one addition: it notes when it
// took each entry, i.e. when it answered the PutEvents that carried it. That is the
// "bus's ack" the latency is measured to.
type stampedBus struct {
	inner *awstest.EventBridge
	mu    sync.Mutex
	at    map[string]time.Time // bus|event_id → first take
	dups  int
	n     int
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(c int) { w.code = c; w.ResponseWriter.WriteHeader(c) }

func (s *stampedBus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	sw := &statusWriter{ResponseWriter: w, code: 200}
	s.inner.ServeHTTP(sw, r)
	now := time.Now()
	if sw.code != 200 {
		return
	}
	var in struct {
		Entries []struct{ EventBusName, Detail string }
	}
	if json.Unmarshal(body, &in) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range in.Entries {
		var d struct {
			EventID string `json:"event_id"`
		}
		json.Unmarshal([]byte(e.Detail), &d)
		k := e.EventBusName + "|" + d.EventID
		if _, ok := s.at[k]; ok {
			s.dups++
			continue
		}
		s.at[k] = now
		s.n++
	}
}

func (s *stampedBus) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

type benchRun struct {
	dests, events, rate int  // rate 0: publish as fast as confirms allow
	size                int  // event body bytes
	cluster             bool // on the Redis Cluster of -cluster-redis, not the server of -redis
}

// latencies are publish-to-bus-answer times, sorted.
type latencies []time.Duration

func (l latencies) at(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(int(float64(len(l))*q), len(l)-1)]
}

type benchResult struct {
	benchRun
	deliveries           int
	perSec               float64
	lat                  latencies
	dups                 int
	rssIdle, rssEnd, hwm int // kB
	startup              time.Duration
	bare                 *bareResult // one-destination rows: the same load without the relay
	redisCPU             []masterCPU // per Redis master, from publish to the last delivery
	idleFor              time.Duration
	idleCPU              []masterCPU // per Redis master, over idleFor after the warm-up, nothing published
	err                  string
}

// masterCPU is the CPU time (used_cpu_user + used_cpu_sys of INFO cpu) one Redis master
// spent over a run's timed phase.
type masterCPU struct {
	addr string
	cpu  time.Duration
}

type bareResult struct {
	perSec float64
	lat    latencies
	err    string
}

func runBench(ctx context.Context, args []string) error {
	var relayBin, stateDir, amqpURL, redisURL, runsFlag, clusterURL, clusterRuns string
	var bareFor, idleFor time.Duration
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&relayBin, "relay", "", "relay binary")
	fs.StringVar(&stateDir, "state", "", "directory for configs and logs")
	fs.StringVar(&amqpURL, "amqp", "", "broker URL (127.0.0.1)")
	fs.StringVar(&redisURL, "redis", "", "Redis URL (127.0.0.1); FLUSHALL before each run")
	fs.StringVar(&runsFlag, "runs", defaultRuns,
		"runs as destinations:events:rate[:bytes] (rate 0 = as fast as confirms allow; bytes default 1024)")
	fs.DurationVar(&bareFor, "bare", 5*time.Second, "bare PutEvents loop duration")
	fs.StringVar(&clusterURL, "cluster-redis", "", "Redis Cluster URL (redis://node?addr=node…, 127.0.0.1) for the -cluster-runs rows; FLUSHALL on every master before each")
	fs.StringVar(&clusterRuns, "cluster-runs", "1000:20:0", "rows run on -cluster-redis after the others, as -runs")
	fs.DurationVar(&idleFor, "idle", 5*time.Second, "per row, how long Redis CPU is read with nothing published, after the warm-up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := loopback("amqp", amqpURL); err != nil {
		return err
	}
	if err := loopback("redis", redisURL); err != nil {
		return err
	}
	var runs []benchRun
	for _, r := range strings.Split(runsFlag, ",") {
		br, err := parseRun(r)
		if err != nil {
			return err
		}
		runs = append(runs, br)
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
		for _, r := range strings.Split(clusterRuns, ",") {
			br, err := parseRun(r)
			if err != nil {
				return err
			}
			br.cluster = true
			runs = append(runs, br)
		}
	}

	// The cloud: STS trusting anyone for the bench role, the stamped EventBridge.
	sts := awstest.NewSTSHandler()
	const role = "arn:aws:iam::111122223333:role/bench-delivery-%d-%d" // one per destination: one trust policy per role
	bus := &stampedBus{inner: awstest.NewEventBridgeHandler(), at: map[string]time.Time{}}
	stsURL, closeSTS, err := serveLoopback(sts)
	if err != nil {
		return err
	}
	defer closeSTS()
	busURL, closeBus, err := serveLoopback(bus)
	if err != nil {
		return err
	}
	defer closeBus()

	load := loadAvg()
	bareRate, bareP50, bareP99, err := barePutEvents(ctx, busURL, bareFor)
	if err != nil {
		return fmt.Errorf("bare PutEvents: %w", err)
	}
	logf("bare PutEvents: %.0f/s, p50 %s, p99 %s", bareRate, bareP50, bareP99)

	rdb := redis.NewClient(mustRedisOpts(redisURL))
	defer rdb.Close()
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i*5 + 3)
	}
	var results []benchResult
	for i, r := range runs {
		var bare *bareResult
		if r.dests == 1 {
			bare = barePipeline(ctx, r, i, amqpURL, busURL, key, bus)
			if bare.err != "" {
				logf("run %d: bare pipeline failed: %s", i+1, bare.err)
			} else {
				logf("run %d: bare pipeline %.0f/s, p50 %s p99 %s", i+1, bare.perSec, bare.lat.at(0.5), bare.lat.at(0.99))
			}
		}
		var res benchResult
		if r.cluster {
			res = benchOne(ctx, r, i, relayBin, stateDir, amqpURL, clusterURL, stsURL, busURL, role, key, bus, sts, cluster, idleFor)
		} else {
			res = benchOne(ctx, r, i, relayBin, stateDir, amqpURL, redisURL, stsURL, busURL, role, key, bus, sts, rdb, idleFor)
		}
		res.bare = bare
		if res.err != "" {
			logf("run %d (%d destinations) failed: %s", i+1, r.dests, res.err)
		}
		results = append(results, res)
	}
	loadAfter := loadAvg()

	fmt.Print(benchReport(results, bareFor, bareRate, bareP50, bareP99, load, loadAfter))
	return nil
}

func benchOne(ctx context.Context, r benchRun, idx int, relayBin, stateDir, amqpURL, redisURL, stsURL, busURL, role string,
	key []byte, bus *stampedBus, sts *awstest.STS, rdb redis.UniversalClient, idleFor time.Duration) (res benchResult) {
	res.benchRun = r
	if err := forEachMaster(ctx, rdb, func(ctx context.Context, m *redis.Client) error { return m.FlushAll(ctx).Err() }); err != nil {
		res.err = err.Error()
		return
	}
	exchange := fmt.Sprintf("bench.%d.%d", idx, time.Now().Unix())
	var cfg strings.Builder
	fmt.Fprintf(&cfg, `identity:
  name: mercamap
  aws_principal_arn: arn:aws:iam::999999999999:role/relay-delivery
rabbitmq: {url: %s, exchange: %s, queue: %s, prefetch: 256}
redis: {url: %q}
signature: {keys: [env:BENCH_HMAC_KEY]}
api: {listen: "127.0.0.1:0"}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s}
delivery:
  lease_ttl: 15s
accounts:
  - {id: acct_bench, tenants: [single-tenant]}
destinations:
`, amqpURL, exchange, exchange, redisURL, stsURL, busURL)
	buses := make([]string, r.dests)
	for i := range r.dests {
		buses[i] = fmt.Sprintf("arn:aws:events:us-east-1:111122223333:event-bus/bench-%d-%d", idx, i)
		fmt.Fprintf(&cfg, "  - {id: d%d, account: acct_bench, connector: eventbridge, bus_arn: %q, role_arn: %q}\n", i, buses[i], fmt.Sprintf(role, idx, i))
	}
	cfgPath := filepath.Join(stateDir, fmt.Sprintf("relay.bench.%d.yaml", idx))
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		res.err = err.Error()
		return
	}
	rep := &replica{name: fmt.Sprintf("bench-%d", idx), bin: relayBin, config: cfgPath, logDir: stateDir,
		env: []string{"BENCH_HMAC_KEY=" + hex.EncodeToString(key), "AWS_ACCESS_KEY_ID=AKIDBENCH",
			"AWS_SECRET_ACCESS_KEY=bench-not-a-secret", "AWS_EC2_METADATA_DISABLED=true"}}
	t0 := time.Now()
	if err := rep.start(); err != nil {
		res.err = err.Error()
		return
	}
	defer rep.kill(syscall.SIGTERM)
	if err := waitLog(ctx, []*replica{rep}, stateDir, `"msg":"consuming"`, 120*time.Second); err != nil {
		res.err = err.Error()
		return
	}
	// The customer's side: each role trusts its destination's ExternalId (from Redis).
	pipe := rdb.Pipeline()
	ext := make([]*redis.StringCmd, r.dests)
	for i := range r.dests {
		ext[i] = pipe.HGet(ctx, fmt.Sprintf("relay:{acct_bench}:dest:d%d", i), "external_id")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		res.err = "read ExternalIds: " + err.Error()
		return
	}
	for i := range r.dests {
		sts.RequireExternalID(fmt.Sprintf(role, idx, i), ext[i].Val())
	}
	pub := &publisher{urls: []string{amqpURL}, exchange: exchange}
	defer pub.close()
	// Warm-up: one event, until every destination has it (leases taken, sessions assumed).
	warm := sizedEvent(exchange, key, 0, r.size)
	pub.send(ctx, []*event{warm})
	base := bus.count()
	if !waitCount(ctx, bus, base, r.dests, 300*time.Second) {
		res.err = fmt.Sprintf("warm-up: %d of %d destinations got the first event in 300 s", bus.count()-base, r.dests)
		return
	}
	res.startup = time.Since(t0)
	res.rssIdle, _ = procStatus(rep.pid())
	logf("%d destinations: warm after %s, RSS %d kB", r.dests, res.startup.Round(time.Millisecond), res.rssIdle)

	base = bus.count()
	dupBase := bus.dups
	evs := make([]*event, r.events)
	for i := range evs {
		evs[i] = sizedEvent(exchange, key, i+1, r.size)
	}
	// What the destinations cost Redis with nothing to deliver (leases renewed, logs
	// watched): a window of idleFor before the load.
	idle0, err := redisCPU(ctx, rdb)
	if err != nil {
		res.err = "INFO cpu: " + err.Error()
		return
	}
	idleStart := time.Now()
	sleepUntil(ctx, idleStart.Add(idleFor))
	cpu0, err := redisCPU(ctx, rdb)
	if err != nil {
		res.err = "INFO cpu: " + err.Error()
		return
	}
	res.idleFor = time.Since(idleStart)
	for _, addr := range slices.Sorted(maps.Keys(cpu0)) {
		res.idleCPU = append(res.idleCPU, masterCPU{addr, cpu0[addr] - idle0[addr]})
	}
	start := time.Now()
	publishAt(ctx, pub, evs, r.rate)
	want := r.dests * r.events
	limit := 120*time.Second + time.Duration(want)*time.Millisecond
	if !waitCount(ctx, bus, base, want, limit) {
		res.err = fmt.Sprintf("%d of %d deliveries after %s", bus.count()-base, want, limit)
		return
	}
	cpu1, err := redisCPU(ctx, rdb)
	if err != nil {
		res.err = "INFO cpu: " + err.Error()
		return
	}
	for _, addr := range slices.Sorted(maps.Keys(cpu1)) {
		res.redisCPU = append(res.redisCPU, masterCPU{addr, cpu1[addr] - cpu0[addr]})
	}
	var last time.Time
	res.lat, last = bus.latencies(evs, buses)
	bus.mu.Lock()
	res.dups = bus.dups - dupBase
	bus.mu.Unlock()
	res.rssEnd, res.hwm = procStatus(rep.pid())
	res.deliveries = want
	res.perSec = float64(want) / last.Sub(start).Seconds()
	logf("%d destinations × %d events of %d B: %.0f deliveries/s, p50 %s p99 %s", r.dests, r.events, r.size,
		res.perSec, res.lat.at(0.5), res.lat.at(0.99))
	return
}

// latencies returns, for every event that reached one of buses, the time from its first
// publish to the bus's answer (sorted), and the last answer among them.
func (s *stampedBus) latencies(evs []*event, buses []string) (latencies, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lat latencies
	var last time.Time
	for _, e := range evs {
		for _, b := range buses {
			if at, ok := s.at[b+"|"+e.id]; ok {
				lat = append(lat, at.Sub(e.sentAt))
				if at.After(last) {
					last = at
				}
			}
		}
	}
	slices.Sort(lat)
	return lat, last
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

func waitCount(ctx context.Context, bus *stampedBus, base, want int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for bus.count()-base < want {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(time.Millisecond)
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

// barePutEvents is a plain SDK client putting one entry at a time on the same bus.
func barePutEvents(ctx context.Context, url string, d time.Duration) (float64, time.Duration, time.Duration, error) {
	c := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDBARE", "bare", "")})
	detail := `{"event_id":"bare","type":"job.completed","data":{"jobId":"x","pad":"` + strings.Repeat("x", 900) + `"}}`
	put := func() error {
		_, err := c.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
			EventBusName: aws.String("arn:aws:events:us-east-1:111122223333:event-bus/bare"),
			Source:       aws.String("com.bare"), DetailType: aws.String("job.completed"), Detail: aws.String(detail)}}})
		return err
	}
	for range 500 { // warm-up
		if err := put(); err != nil {
			return 0, 0, 0, err
		}
	}
	var lat []time.Duration
	start := time.Now()
	for time.Since(start) < d {
		t := time.Now()
		if err := put(); err != nil {
			return 0, 0, 0, err
		}
		lat = append(lat, time.Since(t))
	}
	el := time.Since(start)
	slices.Sort(lat)
	return float64(len(lat)) / el.Seconds(), lat[len(lat)/2], lat[len(lat)*99/100], nil
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
