package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/mercamap/relay/internal/store"
)

// The drill's steps, in the order runDrill takes them: flags, peers, proxies, replicas,
// supervision and faults, load, waits, report. A drill holds what one step leaves for
// the next, and the cleanups each step registers, run in reverse order at its end.

// drill is one run of the fault drill.
type drill struct {
	f        drillFlags
	key      []byte
	cleanups []func()

	throttle *throttleProxy // nil: no throttle window
	stall    *stallProxy    // nil: no stall window
	reps     []*replica
	st       *store.Store

	// Set by faults; read once they are all done (faults.Wait).
	paused   sync.Map // replica name → true while the kill schedule restarts it itself
	start    time.Time
	faults   sync.WaitGroup
	faultMu  sync.Mutex
	faultLog []string

	pub      *publisher
	evs      []*event
	loadSecs float64
	log      []store.LogEntry
	arrived  map[string][]string
}

const drillExchange = "fetcher.job.events"

// onClose runs fn when the drill ends, after those registered later (as defer would).
func (d *drill) onClose(fn func()) { d.cleanups = append(d.cleanups, fn) }

// close runs the cleanups, last registered first.
func (d *drill) close() {
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		d.cleanups[i]()
	}
}

// parseDrillFlags reads the drill's flags.
func parseDrillFlags(args []string) (drillFlags, error) {
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
		return f, err
	}
	return f, nil
}

// startPeers starts the drill's own clusters with -cluster, and refuses any peer not on
// loopback.
func (d *drill) startPeers() error {
	f := &d.f
	if f.clusterDir != "" {
		t0 := time.Now()
		logf("starting a Redis Cluster (3+3) and a 3-node RabbitMQ cluster under %s", f.clusterDir)
		peers, err := startClusterPeers(f.clusterDir)
		if err != nil {
			return err
		}
		d.onClose(peers.close)
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
	return nil
}

// startProxies starts the sink faults' proxies of our own between the relays and the
// sandbox, only when their window is on (otherwise the relays talk to the sandbox
// directly), and returns the EventBridge and Kinesis URLs the relays are given.
func (d *drill) startProxies() (eventsURL, kinesisURL string, err error) {
	f := &d.f
	eventsURL, kinesisURL = f.events, f.kinesis
	if f.throttleFor > 0 {
		if d.throttle, err = startThrottleProxy(f.events); err != nil {
			return "", "", err
		}
		d.onClose(d.throttle.close)
		eventsURL = d.throttle.URL
		logf("EventBridge through the throttle proxy %s → %s", d.throttle.URL, f.events)
	}
	if f.stallFor > 0 {
		u, _ := url.Parse(f.kinesis)
		if d.stall, err = startStallProxy(u.Host); err != nil {
			return "", "", err
		}
		d.onClose(d.stall.close)
		kinesisURL = "http://" + d.stall.Addr
		logf("Kinesis through the stall proxy %s", d.stall)
	}
	return eventsURL, kinesisURL, nil
}

// startReplicas writes the replicas' config, starts two, has the customer's side trust
// each AWS destination's ExternalId, and waits until both consume.
func (d *drill) startReplicas(ctx context.Context, eventsURL, kinesisURL string) error {
	f := &d.f
	cfgPath := filepath.Join(f.stateDir, "relay.drill.yaml")
	if err := os.WriteFile(cfgPath, []byte(drillConfig(*f, drillExchange, eventsURL, kinesisURL)), 0o600); err != nil {
		return err
	}
	env := []string{"DRILL_HMAC_KEY=" + hex.EncodeToString(d.key), "AWS_ACCESS_KEY_ID=AKIDDRILL", "AWS_SECRET_ACCESS_KEY=drill-not-a-secret",
		"AWS_EC2_METADATA_DISABLED=true"}
	d.reps = []*replica{
		{name: "relay-a", bin: f.relayBin, config: cfgPath, logDir: f.stateDir, env: env, debug: true},
		{name: "relay-b", bin: f.relayBin, config: cfgPath, logDir: f.stateDir, env: env, debug: true},
	}
	for _, r := range d.reps {
		if err := r.start(); err != nil {
			return err
		}
	}
	d.onClose(func() {
		for _, r := range d.reps {
			if r.running() {
				r.kill(syscall.SIGTERM)
			}
		}
	})

	st, err := store.Open(f.redisURL)
	if err != nil {
		return err
	}
	d.onClose(func() { st.Close() })
	d.st = st

	// The customer's side: trust each AWS destination's ExternalId (from Redis: the
	// replicas listen on port 0, so the cards are read where the API reads them).
	for _, dd := range []struct{ id, role string }{{"drill-bus", roleBus}, {"drill-stream", roleStream}} {
		var ext string
		deadline := time.Now().Add(30 * time.Second)
		for ext == "" {
			s, err := st.LoadState(ctx, store.Ref{Account: drillAccount, ID: dd.id})
			if err == nil {
				ext = s.ExternalID
			}
			if ext == "" {
				if time.Now().After(deadline) {
					return fmt.Errorf("no ExternalId for %s in Redis after 30 s (logs in %s)", dd.id, f.stateDir)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		if err := postJSON(f.sandbox+"/trust", map[string]string{"role_arn": dd.role, "external_id": ext}); err != nil {
			return err
		}
		logf("%s: %s trusts ExternalId %s", dd.id, dd.role, ext)
	}
	return waitLog(ctx, d.reps, f.stateDir, `"msg":"consuming"`, 30*time.Second)
}

// supervise starts again a replica that ends by itself (and says so) until ctx ends;
// one the kill schedule restarts itself (paused) is left to it.
func (d *drill) supervise(ctx context.Context) {
	for ctx.Err() == nil {
		for _, r := range d.reps {
			if _, p := d.paused.Load(r.name); !p && !r.running() {
				logf("%s ended by itself; starting it again", r.name)
				_ = r.start()
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// note logs a fault's step and keeps it for the report.
func (d *drill) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	d.faultMu.Lock()
	d.faultLog = append(d.faultLog, s)
	d.faultMu.Unlock()
	logf("%s", s)
}

// at is the time since the load started, as the fault log writes it.
func (d *drill) at() string { return fmt.Sprintf("t+%4.1fs", time.Since(d.start).Seconds()) }

// scheduleFaults starts the faults, on a schedule from the start of the load (loadCtx
// ends with the load): a replica killed every killEvery, the broker's and Redis's
// faults, and the sink windows. faults.Wait waits for every one of them.
func (d *drill) scheduleFaults(ctx, loadCtx context.Context) {
	f := &d.f
	d.faults.Add(1)
	go func() {
		defer d.faults.Done()
		n := 0
		for t := f.killEvery; t < f.duration; t += f.killEvery {
			if !sleepUntil(loadCtx, d.start.Add(t)) {
				return
			}
			r := d.reps[n%2]
			n++
			d.paused.Store(r.name, true)
			pid := r.pid()
			r.kill(syscall.SIGKILL)
			d.note("%s SIGKILL %s (pid %d)", d.at(), r.name, pid)
			time.Sleep(f.restartAfter)
			if err := r.start(); err != nil {
				d.note("%s restart %s failed: %v", d.at(), r.name, err)
			} else {
				d.note("%s restarted %s (pid %d)", d.at(), r.name, r.pid())
			}
			d.paused.Delete(r.name)
		}
	}()
	fault := func(when time.Duration, what string, run func() error) {
		if when <= 0 {
			return
		}
		d.faults.Add(1)
		go func() {
			defer d.faults.Done()
			if !sleepUntil(loadCtx, d.start.Add(when)) {
				return
			}
			d.note("%s %s: begin", d.at(), what)
			if err := run(); err != nil {
				d.note("%s %s: FAILED: %v", d.at(), what, err)
				return
			}
			d.note("%s %s: done", d.at(), what)
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
		timed := func(format string, args ...any) { d.note("%s "+format, append([]any{d.at()}, args...)...) }
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
		d.faults.Add(1)
		go func() {
			defer d.faults.Done()
			if !sleepUntil(loadCtx, d.start.Add(from)) {
				return
			}
			begin()
			d.note("%s %s: begin", d.at(), what)
			sleepUntil(ctx, d.start.Add(from+length))
			d.note("%s %s: end (%s)", d.at(), what, end())
		}()
	}
	if d.throttle != nil {
		window(f.throttleAt, f.throttleFor, "EventBridge throttle (every second PutEvents answered ThrottlingException)",
			d.throttle.begin, func() string {
				d.throttle.end()
				seen, n := d.throttle.counts()
				return fmt.Sprintf("%d of %d PutEvents in the window throttled", n, seen)
			})
	}
	if d.stall != nil {
		window(f.stallAt, f.stallFor, "Kinesis stall (the proxy moves no bytes, serves no new connection)",
			d.stall.begin, func() string {
				d.stall.end()
				open, accepted := d.stall.counts()
				return fmt.Sprintf("%d connections held and reset: %d open at the start, %d accepted during it", open+accepted, open, accepted)
			})
	}
}

// load publishes f.rate events/s until loadCtx ends, one in ten job.failed, each resent
// until confirmed (up to giveUp), then waits for the faults to end.
func (d *drill) load(ctx, loadCtx context.Context) {
	f := &d.f
	d.pub = &publisher{urls: f.amqpURLs, exchange: drillExchange}
	giveUp, cancelGiveUp := context.WithTimeout(ctx, f.duration+90*time.Second)
	defer cancelGiveUp()
	tick := time.NewTicker(50 * time.Millisecond)
	for loadCtx.Err() == nil {
		due := int(time.Since(d.start).Seconds()*float64(f.rate)) - len(d.evs)
		if due > 0 {
			batch := make([]*event, 0, due)
			for range min(due, 500) {
				status := "completed"
				if len(d.evs)%10 == 9 {
					status = "failed"
				}
				e := newEvent(drillExchange, d.key, len(d.evs), status)
				d.evs = append(d.evs, e)
				batch = append(batch, e)
			}
			d.pub.send(giveUp, batch)
		}
		select {
		case <-loadCtx.Done():
		case <-tick.C:
		}
	}
	tick.Stop()
	d.loadSecs = time.Since(d.start).Seconds()
	// Anything the last batches left unconfirmed (the broker was down at the end) gets
	// its chance until the give-up deadline.
	d.pub.send(giveUp, d.evs)
	d.pub.close()
	d.faults.Wait()
	confirmed := 0
	for _, e := range d.evs {
		if e.confirmed {
			confirmed++
		}
	}
	logf("load over after %.1f s: %d events published, %d confirmed, %d resends, %d reconnects",
		d.loadSecs, len(d.evs), confirmed, d.pub.resends, d.pub.reconnects)
}

// waitIngested waits until the account log holds every confirmed event, or
// f.ingestTimeout.
func (d *drill) waitIngested(ctx context.Context) {
	deadline := time.Now().Add(d.f.ingestTimeout)
	for {
		log, err := readLog(ctx, d.st)
		d.log = log
		if err == nil {
			inLog := map[string]bool{}
			for _, le := range log {
				inLog[le.EventID] = true
			}
			missing := 0
			for _, e := range d.evs {
				if e.confirmed && !inLog[e.id] {
					missing++
				}
			}
			if missing == 0 {
				break
			}
			if time.Now().After(deadline) {
				logf("after %s the log still lacks %d confirmed events", d.f.ingestTimeout, missing)
				break
			}
		}
		time.Sleep(time.Second)
	}
	logf("account log holds %d entries", len(d.log))
}

// waitDelivered waits until each destination has every matching log entry, or
// f.drainTimeout.
func (d *drill) waitDelivered(ctx context.Context) {
	deadline := time.Now().Add(d.f.drainTimeout)
	for {
		arr, err := fetchArrived(ctx, d.f.sandbox)
		d.arrived = arr
		if err == nil {
			done := true
			for _, dd := range drillDests {
				if len(missingOf(dd, d.log, arr[dd.id])) > 0 {
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
			logf("after %s some destinations have not caught up", d.f.drainTimeout)
			break
		}
		time.Sleep(3 * time.Second)
	}
}

// report reads how each destination ended (a throttle or a stall is not taken, so none
// may be disabled) and what the proxies and the replicas' logs counted, and writes the
// drill's report to w.
func (d *drill) report(ctx context.Context, w io.Writer) error {
	status := map[string]string{}
	for _, dd := range drillDests {
		s, err := d.st.LoadState(ctx, store.Ref{Account: drillAccount, ID: dd.id})
		if err != nil {
			status[dd.id] = "unreadable: " + err.Error()
			continue
		}
		status[dd.id] = s.Status
		if s.Disabled != nil {
			status[dd.id] += " (" + s.Disabled.Reason + ")"
		}
	}
	sf := sinkFaults{attempts: scanAttempts(d.f.stateDir)}
	if d.throttle != nil {
		sf.putEventsInWindow, sf.throttled = d.throttle.counts()
	}
	if d.stall != nil {
		sf.stalledOpen, sf.stalledNew = d.stall.counts()
	}
	return drillReport(w, d.f, d.evs, d.log, d.arrived, d.reps, d.faultLog, d.loadSecs, d.pub, status, sf)
}
