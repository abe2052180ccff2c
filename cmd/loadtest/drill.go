package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// runDrill runs the fault drill and writes its report to stdout.
func runDrill(ctx context.Context, args []string, stdout io.Writer) error {
	f, err := parseDrillFlags(args)
	if err != nil {
		return err
	}
	d := &drill{f: f, key: make([]byte, 32)}
	defer d.close()
	for i := range d.key {
		d.key[i] = byte(i*7 + 1)
	}
	if err := d.startPeers(); err != nil {
		return err
	}
	eventsURL, kinesisURL, err := d.startProxies()
	if err != nil {
		return err
	}
	if err := d.startReplicas(ctx, eventsURL, kinesisURL); err != nil {
		return err
	}
	superCtx, stopSuper := context.WithCancel(ctx)
	defer stopSuper()
	go d.supervise(superCtx)

	d.start = time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, d.f.duration)
	defer stopLoad()
	d.scheduleFaults(ctx, loadCtx)
	d.load(ctx, loadCtx)

	d.waitIngested(ctx)  // every confirmed event must reach the account log
	d.waitDelivered(ctx) // each destination must have every matching log entry
	stopSuper()
	return d.report(ctx, stdout)
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
