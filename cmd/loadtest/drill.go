package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/mercamap/relay/internal/store"
)

const (
	drillAccount = "acct_drill"
	drillQueue   = "relay.job-events"
	roleBus      = "arn:aws:iam::111122223333:role/drill-bus-delivery"
	roleStream   = "arn:aws:iam::111122223333:role/drill-stream-delivery"
)

// drillDest is one destination of the drill's config and how to recognise its arrivals.
type drillDest struct {
	id, connector string
	events        []string // filter; empty = all
}

var drillDests = []drillDest{
	{"drill-bus", "eventbridge", nil},
	{"drill-stream", "kinesis", []string{"job.completed"}}, // a filter: job.failed must not arrive here
	{"drill-topic", "pubsub", nil},
}

func (d drillDest) matches(shortType string) bool {
	return len(d.events) == 0 || slices.Contains(d.events, shortType)
}

type drillFlags struct {
	relayBin, stateDir, hook              string
	amqpURL, redisURL                     string
	sts, events, kinesis, pubsub, sandbox string
	rate                                  int
	duration, killEvery, restartAfter     time.Duration
	rabbitAt, redisAt                     time.Duration
	throttleAt, throttleFor               time.Duration // EventBridge answers every second PutEvents ThrottlingException
	stallAt, stallFor                     time.Duration // the path to Kinesis stops answering
	ingestTimeout, drainTimeout           time.Duration
	leaseTTL                              time.Duration

	// The cluster drill (-cluster DIR): its own Redis Cluster and RabbitMQ cluster.
	clusterDir                  string
	redisBackAfter, rabbitAfter time.Duration // how long a killed node stays down
	peers                       *clusterPeers
	amqpURLs, redisNodes        []string // every node, for the replicas' config
}

func runDrill(ctx context.Context, args []string) error {
	var f drillFlags
	fs := flag.NewFlagSet("drill", flag.ContinueOnError)
	fs.StringVar(&f.relayBin, "relay", "", "relay binary")
	fs.StringVar(&f.stateDir, "state", "", "directory for the config and the replicas' logs")
	fs.StringVar(&f.hook, "hook", "", "program run as HOOK restart-rabbit / HOOK restart-redis")
	fs.StringVar(&f.amqpURL, "amqp", "", "broker URL (127.0.0.1)")
	fs.StringVar(&f.redisURL, "redis", "", "Redis URL (127.0.0.1)")
	fs.StringVar(&f.sts, "sts", "", "sandbox STS endpoint")
	fs.StringVar(&f.events, "events", "", "sandbox EventBridge endpoint")
	fs.StringVar(&f.kinesis, "kinesis", "", "sandbox Kinesis front endpoint")
	fs.StringVar(&f.pubsub, "pubsub", "", "sandbox Pub/Sub host:port")
	fs.StringVar(&f.sandbox, "sandbox", "", "sandbox admin API URL")
	fs.IntVar(&f.rate, "rate", 200, "events published per second")
	fs.DurationVar(&f.duration, "duration", 90*time.Second, "how long the load runs")
	fs.DurationVar(&f.killEvery, "kill-every", 5*time.Second, "SIGKILL a replica this often (alternating)")
	fs.DurationVar(&f.restartAfter, "restart-after", time.Second, "a killed replica is started again after this")
	fs.DurationVar(&f.rabbitAt, "rabbit-at", 15*time.Second, "restart RabbitMQ at this point of the load (0: never)")
	fs.DurationVar(&f.redisAt, "redis-at", 35*time.Second, "SIGKILL and restart Redis at this point of the load (0: never)")
	fs.DurationVar(&f.throttleAt, "throttle-at", 5*time.Second, "EventBridge starts throttling half the writes at this point of the load")
	fs.DurationVar(&f.throttleFor, "throttle-for", 60*time.Second, "how long EventBridge throttles (0: never)")
	// A write only times out (30 s) in a replica that lives that long: with a kill every
	// 5 s, only the replica holding the stream after the last kill (t+85s) does, so the
	// stall must last until more than 30 s after it (it ends at t+130s).
	fs.DurationVar(&f.stallAt, "stall-at", 75*time.Second, "the network path to Kinesis stops answering at this point of the load")
	fs.DurationVar(&f.stallFor, "stall-for", 55*time.Second, "how long the path to Kinesis stalls, longer than the relay's 30 s write timeout (0: never)")
	fs.DurationVar(&f.ingestTimeout, "ingest-timeout", 120*time.Second, "wait this long for the log to hold every confirmed event")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 180*time.Second, "wait this long for every destination to catch up")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", 2*time.Second, "delivery.lease_ttl of the replicas")
	fs.StringVar(&f.clusterDir, "cluster", "", "start a Redis Cluster (3 masters + 3 replicas) and a 3-node RabbitMQ cluster under this directory and drill on them "+
		"(-amqp, -redis and -hook unused): at -rabbit-at SIGKILL the node leading the relay's queue, at -redis-at SIGKILL the master of the account's slot")
	fs.DurationVar(&f.redisBackAfter, "redis-back-after", 10*time.Second, "with -cluster: start the killed Redis master again (as a replica) after this")
	fs.DurationVar(&f.rabbitAfter, "rabbit-back-after", 15*time.Second, "with -cluster: start the killed RabbitMQ node again after this")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.clusterDir != "" {
		t0 := time.Now()
		logf("starting a Redis Cluster (3+3) and a 3-node RabbitMQ cluster under %s", f.clusterDir)
		peers, err := startClusterPeers(f.clusterDir)
		if err != nil {
			return err
		}
		defer peers.close()
		f.peers = peers
		f.amqpURLs = peers.rabbit.URLs()
		f.amqpURL = f.amqpURLs[0]
		f.redisNodes = peers.redis.Addrs()
		f.redisURL = peers.redis.URL()
		logf("clusters ready after %.1f s: Redis %v, RabbitMQ %v", time.Since(t0).Seconds(), f.redisNodes, f.amqpURLs)
	} else {
		f.amqpURLs = []string{f.amqpURL}
	}
	for name, u := range map[string]string{"amqp": f.amqpURL, "redis": f.redisURL, "sts": f.sts, "events": f.events,
		"kinesis": f.kinesis, "sandbox": f.sandbox, "pubsub": "http://" + f.pubsub} {
		if err := loopback(name, u); err != nil {
			return err
		}
	}
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i*7 + 1)
	}
	keyHex := hex.EncodeToString(key)
	const exchange = "fetcher.job.events"
	var err error

	// The sink faults: proxies of our own between the relays and the sandbox, only when
	// their window is on (otherwise the relays talk to the sandbox directly).
	eventsURL, kinesisURL := f.events, f.kinesis
	var throttle *throttleProxy
	if f.throttleFor > 0 {
		if throttle, err = startThrottleProxy(f.events); err != nil {
			return err
		}
		defer throttle.close()
		eventsURL = throttle.URL
		logf("EventBridge through the throttle proxy %s → %s", throttle.URL, f.events)
	}
	var stall *stallProxy
	if f.stallFor > 0 {
		u, _ := url.Parse(f.kinesis)
		if stall, err = startStallProxy(u.Host); err != nil {
			return err
		}
		defer stall.close()
		kinesisURL = "http://" + stall.Addr
		logf("Kinesis through the stall proxy %s", stall)
	}

	cfgPath := filepath.Join(f.stateDir, "relay.drill.yaml")
	if err := os.WriteFile(cfgPath, []byte(drillConfig(f, exchange, eventsURL, kinesisURL)), 0o600); err != nil {
		return err
	}
	env := []string{"DRILL_HMAC_KEY=" + keyHex, "AWS_ACCESS_KEY_ID=AKIDDRILL", "AWS_SECRET_ACCESS_KEY=drill-not-a-secret",
		"AWS_EC2_METADATA_DISABLED=true"}
	reps := []*replica{
		{name: "relay-a", bin: f.relayBin, config: cfgPath, logDir: f.stateDir, env: env, debug: true},
		{name: "relay-b", bin: f.relayBin, config: cfgPath, logDir: f.stateDir, env: env, debug: true},
	}
	for _, r := range reps {
		if err := r.start(); err != nil {
			return err
		}
	}
	defer func() {
		for _, r := range reps {
			if r.running() {
				r.kill(syscall.SIGTERM)
			}
		}
	}()

	st, err := store.Open(f.redisURL)
	if err != nil {
		return err
	}
	defer st.Close()

	// The customer's side: trust each AWS destination's ExternalId (from Redis: the
	// replicas listen on port 0, so the cards are read where the API reads them).
	for _, d := range []struct{ id, role string }{{"drill-bus", roleBus}, {"drill-stream", roleStream}} {
		var ext string
		deadline := time.Now().Add(30 * time.Second)
		for ext == "" {
			s, err := st.LoadState(ctx, store.Ref{Account: drillAccount, ID: d.id})
			if err == nil {
				ext = s.ExternalID
			}
			if ext == "" {
				if time.Now().After(deadline) {
					return fmt.Errorf("no ExternalId for %s in Redis after 30 s (logs in %s)", d.id, f.stateDir)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		if err := postJSON(f.sandbox+"/trust", map[string]string{"role_arn": d.role, "external_id": ext}); err != nil {
			return err
		}
		logf("%s: %s trusts ExternalId %s", d.id, d.role, ext)
	}
	if err := waitLog(ctx, reps, f.stateDir, `"msg":"consuming"`, 30*time.Second); err != nil {
		return err
	}

	// Supervise: a replica that ends by itself is started again (and reported).
	var paused sync.Map // replica name → true while we restart it ourselves
	superCtx, stopSuper := context.WithCancel(ctx)
	defer stopSuper()
	go func() {
		for superCtx.Err() == nil {
			for _, r := range reps {
				if _, p := paused.Load(r.name); !p && !r.running() {
					logf("%s ended by itself; starting it again", r.name)
					_ = r.start()
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()

	// Faults, on a schedule from the start of the load.
	var faultLog []string
	var faultMu sync.Mutex
	note := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		faultMu.Lock()
		faultLog = append(faultLog, s)
		faultMu.Unlock()
		logf("%s", s)
	}
	start := time.Now()
	at := func(d time.Duration) string { return fmt.Sprintf("t+%4.1fs", time.Since(start).Seconds()) }
	var faults sync.WaitGroup
	loadCtx, stopLoad := context.WithTimeout(ctx, f.duration)
	defer stopLoad()
	faults.Add(1)
	go func() {
		defer faults.Done()
		n := 0
		for t := f.killEvery; t < f.duration; t += f.killEvery {
			if !sleepUntil(loadCtx, start.Add(t)) {
				return
			}
			r := reps[n%2]
			n++
			paused.Store(r.name, true)
			pid := r.pid()
			r.kill(syscall.SIGKILL)
			note("%s SIGKILL %s (pid %d)", at(0), r.name, pid)
			time.Sleep(f.restartAfter)
			if err := r.start(); err != nil {
				note("%s restart %s failed: %v", at(0), r.name, err)
			} else {
				note("%s restarted %s (pid %d)", at(0), r.name, r.pid())
			}
			paused.Delete(r.name)
		}
	}()
	fault := func(when time.Duration, what string, run func() error) {
		if when <= 0 {
			return
		}
		faults.Add(1)
		go func() {
			defer faults.Done()
			if !sleepUntil(loadCtx, start.Add(when)) {
				return
			}
			note("%s %s: begin", at(0), what)
			if err := run(); err != nil {
				note("%s %s: FAILED: %v", at(0), what, err)
				return
			}
			note("%s %s: done", at(0), what)
		}()
	}
	hook := func(what string) func() error {
		return func() error {
			cmd := exec.Command(f.hook, what)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			return cmd.Run()
		}
	}
	switch {
	case f.peers != nil:
		timed := func(format string, args ...any) { note("%s "+format, append([]any{at(0)}, args...)...) }
		fault(f.rabbitAt, "kill-rabbit-leader", func() error {
			return f.peers.killRabbitLeader(drillQueue, f.rabbitAfter, timed)
		})
		fault(f.redisAt, "kill-redis-master", func() error {
			return f.peers.killRedisMaster("{"+drillAccount+"}", f.redisBackAfter, timed)
		})
	case f.hook != "":
		fault(f.rabbitAt, "restart-rabbit", hook("restart-rabbit"))
		fault(f.redisAt, "restart-redis", hook("restart-redis"))
	}
	// A sink fault runs its whole window, past the end of the load if need be: the drain
	// must not start with the fault still on.
	window := func(from, length time.Duration, what string, begin func(), end func() string) {
		if length <= 0 {
			return
		}
		faults.Add(1)
		go func() {
			defer faults.Done()
			if !sleepUntil(loadCtx, start.Add(from)) {
				return
			}
			begin()
			note("%s %s: begin", at(0), what)
			sleepUntil(ctx, start.Add(from+length))
			note("%s %s: end (%s)", at(0), what, end())
		}()
	}
	if throttle != nil {
		window(f.throttleAt, f.throttleFor, "EventBridge throttle (every second PutEvents answered ThrottlingException)",
			throttle.begin, func() string {
				throttle.end()
				seen, n := throttle.counts()
				return fmt.Sprintf("%d of %d PutEvents in the window throttled", n, seen)
			})
	}
	if stall != nil {
		window(f.stallAt, f.stallFor, "Kinesis stall (the proxy moves no bytes, serves no new connection)",
			stall.begin, func() string {
				stall.end()
				open, accepted := stall.counts()
				return fmt.Sprintf("%d connections held and reset: %d open at the start, %d accepted during it", open+accepted, open, accepted)
			})
	}

	// The load: f.rate events/s, one in ten job.failed, each resent until confirmed.
	pub := &publisher{urls: f.amqpURLs, exchange: exchange}
	var evs []*event
	giveUp, cancelGiveUp := context.WithTimeout(ctx, f.duration+90*time.Second)
	defer cancelGiveUp()
	tick := time.NewTicker(50 * time.Millisecond)
	for loadCtx.Err() == nil {
		due := int(time.Since(start).Seconds()*float64(f.rate)) - len(evs)
		if due > 0 {
			batch := make([]*event, 0, due)
			for range min(due, 500) {
				status := "completed"
				if len(evs)%10 == 9 {
					status = "failed"
				}
				e := newEvent(exchange, key, len(evs), status)
				evs = append(evs, e)
				batch = append(batch, e)
			}
			pub.send(giveUp, batch)
		}
		select {
		case <-loadCtx.Done():
		case <-tick.C:
		}
	}
	tick.Stop()
	loadSecs := time.Since(start).Seconds()
	// Anything the last batches left unconfirmed (the broker was down at the end) gets
	// its chance until the give-up deadline.
	pub.send(giveUp, evs)
	pub.close()
	faults.Wait()
	confirmed := 0
	for _, e := range evs {
		if e.confirmed {
			confirmed++
		}
	}
	logf("load over after %.1f s: %d events published, %d confirmed, %d resends, %d reconnects",
		loadSecs, len(evs), confirmed, pub.resends, pub.reconnects)

	// Ingest: every confirmed event must reach the account log.
	var log []store.LogEntry
	deadline := time.Now().Add(f.ingestTimeout)
	for {
		log, err = readLog(ctx, st)
		if err == nil {
			inLog := map[string]bool{}
			for _, le := range log {
				inLog[le.EventID] = true
			}
			missing := 0
			for _, e := range evs {
				if e.confirmed && !inLog[e.id] {
					missing++
				}
			}
			if missing == 0 {
				break
			}
			if time.Now().After(deadline) {
				logf("after %s the log still lacks %d confirmed events", f.ingestTimeout, missing)
				break
			}
		}
		time.Sleep(time.Second)
	}
	logf("account log holds %d entries", len(log))

	// Delivery: wait until each destination has every matching log entry, or no progress.
	var arr map[string][]string
	deadline = time.Now().Add(f.drainTimeout)
	for {
		arr, err = fetchArrived(ctx, f.sandbox)
		if err == nil {
			done := true
			for _, d := range drillDests {
				if len(missingOf(d, log, arr[d.id])) > 0 {
					done = false
				}
			}
			if done {
				break
			}
		} else {
			logf("read /arrived: %v", err)
		}
		if time.Now().After(deadline) {
			logf("after %s some destinations have not caught up", f.drainTimeout)
			break
		}
		time.Sleep(3 * time.Second)
	}
	stopSuper()

	// How each destination ended: a throttle or a stall is not taken, so none may be disabled.
	status := map[string]string{}
	for _, d := range drillDests {
		s, err := st.LoadState(ctx, store.Ref{Account: drillAccount, ID: d.id})
		if err != nil {
			status[d.id] = "unreadable: " + err.Error()
			continue
		}
		status[d.id] = s.Status
		if s.Disabled != nil {
			status[d.id] += " (" + s.Disabled.Reason + ")"
		}
	}
	sf := sinkFaults{attempts: scanAttempts(f.stateDir)}
	if throttle != nil {
		sf.putEventsInWindow, sf.throttled = throttle.counts()
	}
	if stall != nil {
		sf.stalledOpen, sf.stalledNew = stall.counts()
	}
	return drillReport(os.Stdout, f, evs, log, arr, reps, faultLog, loadSecs, pub, status, sf)
}

// sinkFaults is what the sink proxies counted, and the delivery attempts the replicas logged.
type sinkFaults struct {
	putEventsInWindow, throttled int
	stalledOpen, stalledNew      int
	attempts                     map[string]map[string]int // destination → "class code" → attempts
}

// scanAttempts counts the "delivery attempt" lines of every replica log in dir by
// destination, class and code: how the relay classified what the faults did.
func scanAttempts(dir string) map[string]map[string]int {
	out := map[string]map[string]int{}
	paths, _ := filepath.Glob(filepath.Join(dir, "relay-*.log"))
	for _, p := range paths {
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if !bytes.Contains(line, []byte(`"msg":"delivery attempt"`)) {
				continue
			}
			var a struct{ Destination, Class, Code string }
			if json.Unmarshal(line, &a) != nil {
				continue
			}
			if out[a.Destination] == nil {
				out[a.Destination] = map[string]int{}
			}
			k := a.Class
			if a.Code != "" {
				k += " " + a.Code
			}
			out[a.Destination][k]++
		}
		fh.Close()
	}
	return out
}

// drillConfig is the replicas' config; events and kinesis are the endpoints they write
// to (the sandbox's, or a fault proxy in front of it).
func drillConfig(f drillFlags, exchange, events, kinesis string) string {
	rabbit, redis := "url: "+f.amqpURL, "url: "+f.redisURL
	if f.peers != nil {
		rabbit = "urls: [" + strings.Join(f.amqpURLs, ", ") + "]"
		redis = "cluster: [" + strings.Join(f.redisNodes, ", ") + "]\n  min_replicas: 1"
	}
	return fmt.Sprintf(`# written by cmd/loadtest drill; one config for both replicas
identity:
  name: mercamap
  aws_principal_arn: arn:aws:iam::999999999999:role/relay-delivery
  external_id_secret: loadtest-external-id-secret-0123456789abcdef  # ExternalIds derived: serve refuses ids kept only in Redis
  gcp_service_account: relay@relay-drill.iam.gserviceaccount.com
rabbitmq:
  %s
  exchange: %s
  queue: %[12]s
  prefetch: 256
redis:
  %[3]s
signature:
  keys: [env:DRILL_HMAC_KEY]
api:
  listen: "127.0.0.1:0"
  metrics_listen: "127.0.0.1:0"
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s, kinesis: %s}
gcp:
  pubsub_endpoint: %s
delivery:
  not_taken_backoff: {initial: 100ms, max: 2s}
  lease_ttl: %[11]s
accounts:
  - {id: %[8]s, tenants: [single-tenant]}
destinations:
  - id: drill-bus
    account: %[8]s
    connector: eventbridge
    bus_arn: arn:aws:events:us-east-1:111122223333:event-bus/drill
    role_arn: %[9]s
  - id: drill-stream
    account: %[8]s
    connector: kinesis
    stream_arn: arn:aws:kinesis:us-east-1:111122223333:stream/drill
    role_arn: %[10]s
    events: [job.completed]
  - id: drill-topic
    account: %[8]s
    connector: pubsub
    project_id: relay-drill
    topic_id: drill-events
`, rabbit, exchange, redis, f.sts, events, kinesis, f.pubsub, drillAccount, roleBus, roleStream, f.leaseTTL.String(), drillQueue)
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Until(t)):
		return true
	}
}

func postJSON(url string, v any) error {
	b, _ := json.Marshal(v)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, body)
	}
	return nil
}

// waitLog waits until every replica's current log file holds marker.
func waitLog(ctx context.Context, reps []*replica, dir, marker string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, r := range reps {
		p := filepath.Join(dir, fmt.Sprintf("%s.%d.log", r.name, r.starts))
		for {
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte(marker)) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("%s did not log %s within %s (%s)", r.name, marker, limit, p)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func readLog(ctx context.Context, st *store.Store) ([]store.LogEntry, error) {
	var all []store.LogEntry
	after := "0"
	for {
		page, err := st.ReadLog(ctx, drillAccount, after, 5000)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < 5000 {
			return all, nil
		}
		after = page[len(page)-1].ID
	}
}

// fetchArrived reads the sandbox's /arrived: event ids per destination, in the order each bus took them.
func fetchArrived(ctx context.Context, base string) (map[string][]string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/arrived", nil)
	resp, err := (&http.Client{Timeout: 120 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	var body struct {
		EventBridge []struct {
			Detail struct {
				EventID string `json:"event_id"`
			} `json:"detail"`
		} `json:"eventbridge"`
		Kinesis []struct {
			Data struct {
				EventID string `json:"event_id"`
			} `json:"data"`
		} `json:"kinesis"`
		PubSub []struct {
			Attributes map[string]string `json:"attributes"`
		} `json:"pubsub"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, e := range body.EventBridge {
		out["drill-bus"] = append(out["drill-bus"], e.Detail.EventID)
	}
	for _, r := range body.Kinesis {
		out["drill-stream"] = append(out["drill-stream"], r.Data.EventID)
	}
	for _, m := range body.PubSub {
		out["drill-topic"] = append(out["drill-topic"], m.Attributes["event_id"])
	}
	return out, nil
}

func missingOf(d drillDest, log []store.LogEntry, got []string) []string {
	have := map[string]bool{}
	for _, id := range got {
		have[id] = true
	}
	var miss []string
	for _, le := range log {
		if d.matches(le.Type) && !have[le.EventID] {
			miss = append(miss, le.EventID)
		}
	}
	return miss
}

type destResult struct {
	expected, arrivals, unique, dups, missing, unexpected, orderBreaks int
	firstBreak                                                         string
	missingIDs                                                         []string
	dupIDs                                                             int      // distinct events delivered more than once
	dupList                                                            []string // each of them: "id ×n"
}

// checkDest compares what one destination got with the account log (what it should get)
// and with the publisher's order (the order it should get it in).
func checkDest(d drillDest, log []store.LogEntry, got []string, published map[string]*event) destResult {
	var r destResult
	expected := map[string]bool{}
	for _, le := range log {
		if d.matches(le.Type) {
			expected[le.EventID] = true
		}
	}
	r.expected = len(expected)
	r.arrivals = len(got)
	seen := map[string]int{}
	var first []string
	for _, id := range got {
		seen[id]++
		if seen[id] > 1 {
			r.dups++
			if seen[id] == 2 {
				r.dupIDs++
			}
			continue
		}
		if !expected[id] {
			r.unexpected++
			continue
		}
		first = append(first, id)
	}
	r.orderBreaks, r.firstBreak = orderBreaks(first, published)
	r.unique = len(seen)
	for _, id := range got { // in first-arrival order
		if n := seen[id]; n > 1 {
			r.dupList = append(r.dupList, fmt.Sprintf("%s ×%d", short(id), n))
			seen[id] = 1
		}
	}
	r.missingIDs = missingOf(d, log, got)
	r.missing = len(r.missingIDs)
	return r
}

// orderBreaks counts the events of ids (first arrivals, or log entries, in order) that
// came before an event the broker must have queued ahead of them. A is queued before B for
// certain when the broker confirmed a send of A before B was first published: one channel
// keeps its messages in order, and the publisher opens a new channel only once the old
// one's confirms are in. An event resent after a lost confirm may sit in the queue at any
// of its sends, so its order is checked against that span only. ids not published are
// skipped.
func orderBreaks(ids []string, published map[string]*event) (int, string) {
	type at struct {
		e   *event
		pos int
	}
	var byFirst, byConfirm []at
	for i, id := range ids {
		if e, ok := published[id]; ok {
			byFirst = append(byFirst, at{e, i})
			if e.confirmed {
				byConfirm = append(byConfirm, at{e, i})
			}
		}
	}
	slices.SortFunc(byFirst, func(a, b at) int { return a.e.firstSeq - b.e.firstSeq })
	slices.SortFunc(byConfirm, func(a, b at) int { return a.e.confirmSeq - b.e.confirmSeq })
	breaks, j := 0, 0
	var latest *at // of the events confirmed before the current one was first published, the last to come
	var firstBreak string
	for _, b := range byFirst {
		for ; j < len(byConfirm) && byConfirm[j].e.confirmSeq < b.e.firstSeq; j++ {
			if latest == nil || byConfirm[j].pos > latest.pos {
				latest = &byConfirm[j]
			}
		}
		if latest != nil && latest.pos > b.pos {
			breaks++
			if firstBreak == "" {
				firstBreak = fmt.Sprintf("#%d is %s (first published as #%d), before #%d %s, which the broker had confirmed (as #%d) by then",
					b.pos+1, short(b.e.id), b.e.firstSeq, latest.pos+1, short(latest.e.id), latest.e.confirmSeq)
			}
		}
	}
	return breaks, firstBreak
}

func drillReport(w io.Writer, f drillFlags, evs []*event, log []store.LogEntry, arr map[string][]string,
	reps []*replica, faults []string, loadSecs float64, pub *publisher, status map[string]string, sf sinkFaults) error {
	confirmed, unconfirmed := 0, 0
	inLog := map[string]int{}
	for i, le := range log {
		inLog[le.EventID] = i
	}
	var lostIngest []string
	pubIdx := map[string]int{}
	for i, e := range evs {
		pubIdx[e.id] = i
		if e.confirmed {
			confirmed++
			if _, ok := inLog[e.id]; !ok {
				lostIngest = append(lostIngest, e.id)
			}
		} else {
			unconfirmed++
		}
	}
	published := map[string]*event{}
	for _, e := range evs {
		published[e.id] = e
	}
	logIDs := make([]string, len(log))
	for i, le := range log {
		logIDs[i] = le.EventID
	}
	logBreaks, logFirstBreak := orderBreaks(logIDs, published)
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Fault drill (%s)\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "load: %d events/s for %.0f s; lease_ttl %s; replica SIGKILL every %s (restarted after %s); ",
		f.rate, loadSecs, f.leaseTTL, f.killEvery, f.restartAfter)
	if f.peers != nil {
		fmt.Fprintf(&b, "3-node RabbitMQ cluster (rabbitmq.urls), SIGKILL of the node leading %s at t+%s (started again after %s); "+
			"Redis Cluster of 3 masters + 3 replicas (redis.cluster, redis.min_replicas 1), SIGKILL of the master of %s's slot at t+%s (its replica promoted; the old master started again after %s)",
			drillQueue, f.rabbitAt, f.rabbitAfter, drillAccount, f.redisAt, f.redisBackAfter)
	} else {
		fmt.Fprintf(&b, "RabbitMQ restart at t+%s; Redis SIGKILL+restart (AOF always) at t+%s", f.rabbitAt, f.redisAt)
	}
	if f.throttleFor > 0 {
		fmt.Fprintf(&b, "; EventBridge throttles every second PutEvents from t+%s for %s", f.throttleAt, f.throttleFor)
	}
	if f.stallFor > 0 {
		fmt.Fprintf(&b, "; the path to Kinesis stalls from t+%s for %s", f.stallAt, f.stallFor)
	}
	fmt.Fprint(&b, "\n\n")
	fmt.Fprintln(&b, "faults:")
	for _, s := range faults {
		fmt.Fprintln(&b, "  "+s)
	}
	for _, r := range reps {
		ex := r.exits()
		fmt.Fprintf(&b, "  %s: %d starts, %d SIGKILLs by the drill, %d exits on its own\n", r.name, r.starts, r.killed, len(ex))
		for _, e := range ex {
			fmt.Fprintln(&b, "    exited: "+e)
		}
	}
	if f.throttleFor > 0 {
		fmt.Fprintf(&b, "  EventBridge throttle proxy: %d ThrottlingException answers, of %d PutEvents in the window\n", sf.throttled, sf.putEventsInWindow)
	}
	if f.stallFor > 0 {
		fmt.Fprintf(&b, "  Kinesis stall proxy: %d connections stalled (%d open at the start, %d accepted during it), reset at the end\n",
			sf.stalledOpen+sf.stalledNew, sf.stalledOpen, sf.stalledNew)
	}
	fmt.Fprintln(&b, "  delivery attempts the replicas logged (class code: count):")
	for _, d := range drillDests {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(sf.attempts[d.id])) {
			parts = append(parts, fmt.Sprintf("%s: %d", k, sf.attempts[d.id][k]))
		}
		fmt.Fprintf(&b, "    %s: %s\n", d.id, strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, "\npublished %d, confirmed %d, never confirmed %d (resends after lost confirms: %d, publisher reconnects: %d)\n",
		len(evs), confirmed, unconfirmed, pub.resends, pub.reconnects)
	fmt.Fprintf(&b, "account log: %d entries; confirmed events missing from it: %d; entries out of the publisher's confirmed order: %d\n",
		len(log), len(lostIngest), logBreaks)
	if logFirstBreak != "" {
		fmt.Fprintf(&b, "account log: first order break: %s\n", logFirstBreak)
	}
	fmt.Fprintln(&b)

	ok := len(lostIngest) == 0 && logBreaks == 0
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "destination\tconnector\texpected\tarrivals\tdistinct\tduplicates (events)\tmissing\tunexpected\torder breaks\tended\tverdict\t")
	var details, dupLines []string
	for _, d := range drillDests {
		r := checkDest(d, log, arr[d.id], published)
		if len(r.dupList) > 0 {
			const most = 20
			more := ""
			if len(r.dupList) > most {
				more = fmt.Sprintf(", … and %d more", len(r.dupList)-most)
			}
			dupLines = append(dupLines, fmt.Sprintf("  %s: %s%s", d.id, strings.Join(r.dupList[:min(most, len(r.dupList))], ", "), more))
		}
		verdict := "OK"
		ended := strings.SplitN(status[d.id], " ", 2)[0]
		if r.missing > 0 || r.orderBreaks > 0 || r.unexpected > 0 || ended != store.Active {
			verdict = "FAIL"
			ok = false
		}
		if ended != store.Active {
			details = append(details, fmt.Sprintf("%s: ended %s, not active", d.id, status[d.id]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d (%d)\t%d\t%d\t%d\t%s\t%s\t\n", d.id, d.connector, r.expected, r.arrivals, r.unique,
			r.dups, r.dupIDs, r.missing, r.unexpected, r.orderBreaks, ended, verdict)
		if r.firstBreak != "" {
			details = append(details, fmt.Sprintf("%s: first order break: %s", d.id, r.firstBreak))
		}
		if r.missing > 0 {
			ids := r.missingIDs[:min(5, len(r.missingIDs))]
			for i := range ids {
				ids[i] = fmt.Sprintf("%s (log #%d)", short(ids[i]), inLog[ids[i]])
			}
			details = append(details, fmt.Sprintf("%s: %d missing, first: %s", d.id, r.missing, strings.Join(ids, ", ")))
		}
	}
	tw.Flush()
	for _, s := range details {
		fmt.Fprintln(&b, s)
	}
	if len(dupLines) > 0 {
		fmt.Fprintln(&b, "\nduplicates delivered (at-least-once: allowed, receivers drop a repeat by event_id):")
		for _, s := range dupLines {
			fmt.Fprintln(&b, s)
		}
	}
	if len(lostIngest) > 0 {
		ids := lostIngest[:min(5, len(lostIngest))]
		for i := range ids {
			ids[i] = short(ids[i]) + fmt.Sprintf(" (published #%d)", pubIdx[ids[i]])
		}
		fmt.Fprintf(&b, "LOST AT INGEST: %d confirmed events never reached the log, first: %s\n", len(lostIngest), strings.Join(ids, ", "))
	}
	if ok {
		fmt.Fprintln(&b, "\nverdict: PASS — every confirmed event reached every matching destination, first arrivals and the account log in the publisher's confirmed order; every destination ended active (none disabled)")
	} else {
		fmt.Fprintln(&b, "\nverdict: FAIL")
	}
	fmt.Fprint(w, b.String())
	if !ok {
		return errors.New("drill check failed")
	}
	return nil
}
