package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mercamap/relay"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/netdelay"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/upgrade"
)

// TestARollingUpgradeFromThePreviousReleaseLosesNothing does what the chart does on an
// upgrade (RollingUpdate, maxSurge 1, maxUnavailable 0) with the previous release,
// built from this repository's history, and this tree: two old replicas deliver to six
// destinations of two accounts (all three connectors, two made through the API) while a
// publisher sends 40 events a second; a new replica starts and is ready, an old one is
// SIGTERMed, and again. Every confirmed event reaches each of its destinations' buses,
// first arrivals in the confirmed order, with at most uncommitted_max repeats a handover;
// the channels every live replica serves stay gap-free and of the documented types; old
// and new replicas show the same cards; the API's destinations and a console session
// made on the old replicas outlive them.
//
// Once the last old replica is gone the deployment switches to this release's state
// format by itself (a heartbeat later); deliveries go on across the switch, and a
// replica of the previous release started after it refuses to start, saying why.
func TestARollingUpgradeFromThePreviousReleaseLosesNothing(t *testing.T) {
	onEachRedisMode(t, func(t *testing.T, redisURL string) {
		r := startRoll(t, redisURL)
		r.rollTo(r.newBin, "new")
		r.waitDelivering("after the switch to state format " + fmt.Sprint(thisRelease().Target()))
		r.checkRollbackRefused()
		r.finish()
	})
}

// TestARollbackBeforeTheSwitchLosesNothing rolls the previous release into this one as
// the chart does, and back before the switch: a new replica replaces one old one, then
// an old replica replaces it again, with the checks of the upgrade's test over the
// whole run. The format in force stays 1 throughout.
func TestARollbackBeforeTheSwitchLosesNothing(t *testing.T) {
	onEachRedisMode(t, func(t *testing.T, redisURL string) {
		r := startRoll(t, redisURL)
		r.rollSome(r.newBin, "new", 1)
		r.rollTo(r.oldBin, "old")
		r.finish()
	})
}

// checkRollbackRefused starts a replica of the previous release after the switch: it
// must exit non-zero at once with the guard's sentence, writing nothing.
func (r *roll) checkRollbackRefused() {
	t := r.t
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	metricsListen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	cmd, logs := startRelay(t, r.oldBin, r.writeConfig(listen, metricsListen), rollEnv...)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("a replica of relay %s started after the switch to state format %d is still running",
			previousRelease().Version, thisRelease().Target())
	}
	want := fmt.Sprintf("relay %s cannot start", previousRelease().Version)
	if err == nil || !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), fmt.Sprintf("state format %d", thisRelease().Target())) {
		t.Fatalf("a replica of the previous release after the switch: exit %v, want it refused with %q naming state format %d; it logged:\n%s",
			err, want, thisRelease().Target(), logs.String())
	}
	t.Logf("a replica of relay %s after the switch to state format %d: %v, %s", previousRelease().Version,
		thisRelease().Target(), err, lineWith(logs.String(), want))
}

// onEachRedisMode runs test on a private Redis server and on the test binary's shared
// Redis Cluster (emptied first).
func onEachRedisMode(t *testing.T, test func(t *testing.T, redisURL string)) {
	t.Run("single", func(t *testing.T) { test(t, testpeer.StartRedis(t).URL()) })
	t.Run("cluster", func(t *testing.T) { test(t, testpeer.SharedRedisCluster(t).URL()) })
}

// rollInterval is the publisher's interval: 40 events a second, or RELAY_ROLL_RATE's (a
// by-hand run under more load).
func rollInterval(t *testing.T) time.Duration {
	rate := 40
	if v := os.Getenv("RELAY_ROLL_RATE"); v != "" {
		if _, err := fmt.Sscan(v, &rate); err != nil || rate < 1 {
			t.Fatalf("RELAY_ROLL_RATE=%q: want events a second", v)
		}
	}
	return time.Second / time.Duration(rate)
}

// The roll's tokens, one per scope.
const (
	rollAdminToken = "roll-admin-token-0123456789abcdef"
	rollAcct1Token = "roll-acct1-token-0123456789abcdef"
	rollAcct2Token = "roll-acct2-token-0123456789abcdef"
	// rollUncommittedMax is delivery.uncommitted_max.
	rollUncommittedMax = 4
	// rollRepeatsMax is what a handover may send again: a 0.2.0 replica's uncommitted
	// writes, or a 0.3.0 replica's window while state format 1 is in force (what ended
	// past the cursor: at most the look-ahead, 4 × the default in_flight of 16) and
	// its uncommitted writes. Under format 2 a handover repeats at most in_flight +
	// uncommitted_max.
	rollRepeatsMax = 4*16 + rollUncommittedMax
)

// roll is a deployment of relay replicas on one queue and one Redis, delivering to six
// destinations on local buses, that a test rolls from one binary to another as the chart
// does. Every replica it started stays in replicas; the live ones are those that were
// ready and were not sent SIGTERM. command runs either release's other subcommands
// against the deployment (its config), redis reaches its Redis directly.
type roll struct {
	t                      *testing.T
	oldBin, newBin         string // the previous release's relay and this tree's
	redisURL, amqpURL      string
	exchange, queue        string
	config                 string // the deployment's config, listeners on port 0: for commands
	sts                    *awstest.STS
	bus                    *awstest.EventBridge
	kinesalite, kinesisURL string // kinesalite itself, and the proxy the relay writes through
	ps                     *pstest.Server
	busURL, psAddr         string // where the relay reaches EventBridge and Pub/Sub: late
	dests                  []*rollDest
	pub                    *rollPublisher
	watch                  *channelWatch
	stops                  int    // replicas stopped: each a handover of what it held
	session, sessionOn     string // a console session of acct_1, and the replica that opened it

	mu       sync.Mutex
	replicas []*replica
	rdb      *store.Store
}

// rollDest is one destination of the roll and where its bus can be read.
type rollDest struct {
	id, account, connector string
	madeByAPI              bool
	arrivals               func() []string // event ids at its bus in arrival order, repeats included
}

// replica is one `relay serve` process of the roll.
type replica struct {
	name, bin    string
	cmd          *exec.Cmd
	logs         *syncBuffer
	api, metrics string // http://127.0.0.1:port of its API and of its operator listener
	exited       chan struct{}
	exitErr      error       // set before exited closes
	ready        atomic.Bool // its /readyz answered 200
	terminated   atomic.Bool // the test sent SIGTERM
}

func (p *replica) gone() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// startRoll starts the peers, two replicas of the previous release with every
// destination active (two of them made through the API), a console session opened on
// them, the publisher and the channels' watch.
func startRoll(t *testing.T, redisURL string) *roll {
	t.Helper()
	oldBin, newBin := rollBinaries(t)
	r := &roll{t: t, oldBin: oldBin, newBin: newBin, redisURL: redisURL, amqpURL: testpeer.SharedRabbitMQ(t)}
	suffix := fmt.Sprint(time.Now().UnixNano())
	r.exchange, r.queue = "relay-test-roll-"+suffix, "relay-test-roll-"+suffix
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the replicas' logs:\n%s", r.logTails())
		}
	})
	r.sts, r.bus = awstest.NewSTS(t), awstest.NewEventBridge(t)
	r.bus.RequireSessionFrom(r.sts)
	r.kinesalite = awstest.StartKinesalite(t)
	awstest.CreateStream(t, r.kinesalite, "orders-stream")
	awstest.CreateStream(t, r.kinesalite, "acct2-stream")
	proxy := awstest.NewFaultProxy(t, r.kinesalite) // takes only writes signed with the STS's sessions
	proxy.RequireSessionFrom(r.sts)
	r.ps = pstest.NewServer()
	t.Cleanup(func() { _ = r.ps.Close() })
	// Every bus answers rollLatency late, as one in another region would: a 0.3.0
	// replica has several writes in flight, a 0.2.0 one a write at a time.
	r.busURL, r.kinesisURL = "http://"+lateProxy(t, r.bus.URL), "http://"+lateProxy(t, proxy.URL)
	r.psAddr = lateProxy(t, r.ps.Addr)
	admin, err := vkit.NewTopicAdminClient(context.Background(), option.WithEndpoint(r.ps.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// The customers labelled their topics before adding them.
	for topic, acct := range map[string]string{"api-topic": "acct_1", "acct2-topic": "acct_2"} {
		if _, err := admin.CreateTopic(t.Context(), &pubsubpb.Topic{Name: "projects/acme-prod/topics/" + topic,
			Labels: map[string]string{"mercamap-account": acct}}); err != nil {
			t.Fatal(err)
		}
	}
	r.dests = []*rollDest{
		{id: "orders-bus", account: "acct_1", connector: "eventbridge", arrivals: r.busArrivals("orders")},
		{id: "orders-stream", account: "acct_1", connector: "kinesis", arrivals: r.streamArrivals("orders-stream")},
		{id: "api-topic", account: "acct_1", connector: "pubsub", madeByAPI: true, arrivals: r.topicArrivals("api-topic")},
		{id: "acct2-topic", account: "acct_2", connector: "pubsub", arrivals: r.topicArrivals("acct2-topic")},
		{id: "acct2-bus", account: "acct_2", connector: "eventbridge", madeByAPI: true, arrivals: r.busArrivals("acct2")},
		{id: "acct2-stream", account: "acct_2", connector: "kinesis", arrivals: r.streamArrivals("acct2-stream")},
	}
	r.config = r.writeConfig("127.0.0.1:0", "127.0.0.1:0")
	for _, bin := range []string{r.oldBin, r.newBin} {
		if out, err := r.command(bin, "check-config", "--config", r.config); err != nil {
			t.Fatalf("%s check-config: %v\n%s", bin, err, out)
		}
	}
	_, ch := brokerChannel(t, r.amqpURL, r.queue)

	first := r.start("old", r.oldBin)
	r.start("old", r.oldBin)
	// The queue is bound once a replica consumes: no confirmed event is unroutable.
	r.waitUntil(60*time.Second, "the first replica consuming", func() bool {
		return strings.Contains(first.logs.String(), `"msg":"consuming"`)
	})

	// The file's AWS destinations: each role trusts the ExternalId the relay issued.
	for _, d := range []struct{ acct, id string }{{"acct_1", "orders-bus"}, {"acct_1", "orders-stream"}, {"acct_2", "acct2-stream"}} {
		r.sts.RequireExternalID(rollRole(d.id), issuedExternalID(t, r.redisURL, d.acct, d.id))
	}
	// The API's: a Pub/Sub topic by acct_1's token, an EventBridge bus by an admin.
	made := httpSend(t, http.MethodPost, first.api+"/v1/connectors/pubsub/destinations", rollAcct1Token,
		`{"id":"api-topic","project_id":"acme-prod","topic_id":"api-topic"}`)
	if made.status != http.StatusCreated {
		t.Fatalf("create api-topic: %d %s", made.status, made.body)
	}
	made = httpSend(t, http.MethodPost, first.api+"/v1/connectors/eventbridge/destinations", rollAdminToken,
		`{"id":"acct2-bus","account":"acct_2","bus_arn":"arn:aws:events:us-east-1:111122223333:event-bus/acct2","role_arn":"`+rollRole("acct2-bus")+`"}`)
	if made.status != http.StatusCreated {
		t.Fatalf("create acct2-bus: %d %s", made.status, made.body)
	}
	r.sts.RequireExternalID(rollRole("acct2-bus"), *decodeAs[apiCard](t, made).ExternalID)
	for _, d := range r.dests {
		r.waitUntil(60*time.Second, d.id+" active", func() bool {
			a := httpDo(t, http.MethodGet, first.api+d.cardPath(), rollAdminToken)
			return a.status == http.StatusOK && decodeAs[apiCard](t, a).Status == "active"
		})
	}

	// A customer signs in to the console: a link minted on one old replica, exchanged
	// for a session on the other.
	second := r.live()[1]
	r.session, r.sessionOn = sessionToken(t, exchangeLink(t, second.api, r.mintLink(first))), second.name

	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	r.pub = startRollPublisher(t, ch, r.exchange, rollInterval(t))
	r.watch = r.watchChannels()
	r.waitDelivering("before the roll")
	return r
}

// mintLink is a sign-in link of acct_1 minted on p with the admin token.
func (r *roll) mintLink(p *replica) string {
	r.t.Helper()
	a := httpSend(r.t, http.MethodPost, p.api+"/v1/accounts/acct_1/sign-in-links", rollAdminToken, "")
	var link struct{ URL string }
	if a.status != http.StatusCreated || json.Unmarshal([]byte(a.body), &link) != nil {
		r.t.Fatalf("mint a link on %s: %d %s", p.name, a.status, a.body)
	}
	return link.URL
}

// rollRole is the customer's role for the AWS destination id.
func rollRole(id string) string { return "arn:aws:iam::111122223333:role/" + id }

func (d *rollDest) cardPath() string {
	return "/v1/connectors/" + d.connector + "/destinations/" + d.id
}

// writeConfig writes a replica's config with its listeners and returns its path.
func (r *roll) writeConfig(listen, metricsListen string) string {
	r.t.Helper()
	path := filepath.Join(r.t.TempDir(), "relay.yaml")
	cfg := fmt.Sprintf(`
identity:
  name: mercamap
  aws_principal_arn: arn:aws:iam::999999999999:role/relay
  gcp_service_account: relay@relay-test.iam.gserviceaccount.com
  external_id_secret: external-id-secret-for-the-test-0123456789
rabbitmq: {url: %s, exchange: %s, queue: %s, prefetch: 32}
redis: {url: "%s"}
signature: {keys: [env:TEST_HMAC_KEY]}
api:
  listen: "%s"
  metrics_listen: "%s"
  tokens:
    - {scope: admin, token: env:TEST_ADMIN_TOKEN}
    - {scope: "account:acct_1", token: env:TEST_ACCT1_TOKEN}
    - {scope: "account:acct_2", token: env:TEST_ACCT2_TOKEN}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s, kinesis: %s}
gcp: {pubsub_endpoint: %s}
delivery:
  lease_ttl: 1s
  uncommitted_max: %d
  not_taken_backoff: {initial: 10ms, max: 200ms}
  setup_check: {initial: 20ms, max: 200ms}
accounts:
  - {id: acct_1, tenants: [t1]}
  - {id: acct_2, tenants: [t2]}
destinations:
  - {id: orders-bus, account: acct_1, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/orders", role_arn: "%s"}
  - {id: orders-stream, account: acct_1, connector: kinesis, stream_arn: "arn:aws:kinesis:us-east-1:111122223333:stream/orders-stream", role_arn: "%s"}
  - {id: acct2-topic, account: acct_2, connector: pubsub, project_id: acme-prod, topic_id: acct2-topic}
  - {id: acct2-stream, account: acct_2, connector: kinesis, stream_arn: "arn:aws:kinesis:us-east-1:111122223333:stream/acct2-stream", role_arn: "%s"}
`, r.amqpURL, r.exchange, r.queue, r.redisURL, listen, metricsListen, r.sts.URL, r.busURL, r.kinesisURL, r.psAddr,
		rollUncommittedMax, rollRole("orders-bus"), rollRole("orders-stream"), rollRole("acct2-stream"))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		r.t.Fatal(err)
	}
	return path
}

// rollEnv is what every replica and command of the roll gets besides startRelay's.
var rollEnv = []string{"TEST_ADMIN_TOKEN=" + rollAdminToken, "TEST_ACCT1_TOKEN=" + rollAcct1Token, "TEST_ACCT2_TOKEN=" + rollAcct2Token}

// command runs bin (either release) with args against the deployment, as an operator
// would beside it, and returns what it printed.
func (r *roll) command(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), "TEST_HMAC_KEY="+testKeyHex), rollEnv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// redis is a client of the deployment's Redis (one server or the cluster), for checks
// the API does not offer; closed when the test ends.
func (r *roll) redis() redis.UniversalClient {
	r.t.Helper()
	if r.rdb == nil {
		st, err := store.Open(r.redisURL)
		if err != nil {
			r.t.Fatal(err)
		}
		r.t.Cleanup(func() { st.Close() })
		r.rdb = st
	}
	return r.rdb.Client()
}

// start starts a replica of bin, named after its release and rank, and waits until it
// is ready as the chart's probe sees it: /readyz 200 on its operator listener.
func (r *roll) start(release, bin string) *replica {
	t := r.t
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	metricsListen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	r.mu.Lock()
	rank := 1
	for _, p := range r.replicas {
		if strings.HasPrefix(p.name, release+"-") {
			rank++
		}
	}
	r.mu.Unlock()
	p := &replica{name: fmt.Sprintf("%s-%d", release, rank), bin: bin, api: "http://" + listen, metrics: "http://" + metricsListen,
		exited: make(chan struct{})}
	p.cmd, p.logs = startRelay(t, bin, r.writeConfig(listen, metricsListen), rollEnv...)
	go func() { p.exitErr = p.cmd.Wait(); close(p.exited) }()
	r.mu.Lock()
	r.replicas = append(r.replicas, p)
	r.mu.Unlock()
	r.waitUntil(60*time.Second, p.name+" ready (/readyz 200 on its operator listener)", func() bool {
		return httpDo(t, http.MethodGet, p.metrics+"/readyz", "").status == http.StatusOK
	})
	p.ready.Store(true)
	t.Logf("%s ready (%d live)", p.name, len(r.live()))
	return p
}

// stop SIGTERMs p and waits for it to exit, which it must do cleanly (status 0).
func (r *roll) stop(p *replica) {
	t := r.t
	t.Helper()
	p.terminated.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM %s: %v", p.name, err)
	}
	began := time.Now()
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, into its log
		<-p.exited
		t.Fatalf("%s did not exit within 60 s of SIGTERM", p.name)
	}
	if p.exitErr != nil {
		t.Fatalf("%s exited with %v after SIGTERM, want status 0", p.name, p.exitErr)
	}
	r.stops++
	t.Logf("%s stopped in %s", p.name, time.Since(began).Round(time.Millisecond))
}

// live lists the replicas that were ready and have not been sent SIGTERM, oldest first.
func (r *roll) live() []*replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*replica
	for _, p := range r.replicas {
		if p.ready.Load() && !p.terminated.Load() {
			out = append(out, p)
		}
	}
	return out
}

// checkNoneExitedAlone fails the test when a replica, ready or starting, ended without
// the test's SIGTERM.
func (r *roll) checkNoneExitedAlone() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.replicas {
		if p.gone() && !p.terminated.Load() {
			r.t.Fatalf("%s exited by itself: %v", p.name, p.exitErr)
		}
	}
}

// waitUntil polls cond (every 50 ms) until it holds, failing the test after timeout or
// as soon as a replica exits by itself.
func (r *roll) waitUntil(timeout time.Duration, what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		r.checkNoneExitedAlone()
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rollTo replaces the live replicas one by one with replicas of bin, as RollingUpdate
// with maxSurge 1 and maxUnavailable 0 does: start one and wait until it is ready
// (reading every card on it and on the replica about to go), SIGTERM an old one and
// wait for its exit, then see every destination delivering. Once all are replaced, it
// checks what the customers made is still there (checkKept).
func (r *roll) rollTo(bin, release string) { r.rollSome(bin, release, len(r.live())) }

// rollSome replaces n of the live replicas as rollTo does, oldest first.
func (r *roll) rollSome(bin, release string, n int) {
	r.t.Helper()
	for _, old := range r.live()[:n] {
		p := r.start(release, bin)
		r.checkStatus("with " + p.name + " beside " + old.name)
		r.sameCards(old, p)
		r.stop(old)
		r.waitDelivering(fmt.Sprintf("after %s replaced %s", p.name, old.name))
	}
	r.checkStatus("after the roll to " + release)
	r.checkKept()
}

// checkStatus runs this release's relay upgrade status beside the deployment: it lists
// every live replica, and only those, with the release it runs (a replica of the
// previous release as the release before this one in upgrade.Releases); state format 1
// in force and the switch waiting while a replica of the previous release lives, this
// release's format and nothing pending once none does; each new replica's /metrics
// names its release.
func (r *roll) checkStatus(when string) {
	r.t.Helper()
	var out string
	ok := waitFor(15*time.Second, func() bool {
		s, err := r.command(r.newBin, "upgrade", "status", "--config", r.config)
		out = s
		live := r.live()
		if err != nil || !strings.Contains(s, fmt.Sprintf("replicas:     %d live", len(live))) {
			return false
		}
		for _, p := range live {
			want := "relay " + relay.Version() + " "
			if p.bin == r.oldBin {
				want = "relay " + previousRelease().Version + " "
			}
			if !strings.Contains(lineWith(s, fmt.Sprintf("-%d-", p.cmd.Process.Pid)), want) {
				return false
			}
		}
		// While a replica of the previous release lives, format 1 stays in force and the
		// switch to this release's waits for it; once none does, the switch comes by
		// itself a heartbeat later.
		if slices.ContainsFunc(live, func(p *replica) bool { return p.bin == r.oldBin }) {
			return strings.Contains(s, "state format: 1 in force") &&
				strings.Contains(s, fmt.Sprintf("pending:      the switch to state format %d waits for", thisRelease().Target()))
		}
		return strings.Contains(s, fmt.Sprintf("state format: %d in force (since relay %s switched", thisRelease().Target(), relay.Version())) &&
			strings.Contains(s, "pending:      nothing")
	})
	r.checkNoneExitedAlone()
	if !ok {
		r.t.Fatalf("relay upgrade status %s does not list the live replicas with their releases:\n%s", when, out)
	}
	for _, p := range r.live() {
		if p.bin == r.newBin {
			if page := httpDo(r.t, http.MethodGet, p.metrics+"/metrics", "").body; !strings.Contains(page, `version="`+relay.Version()+`"`) {
				r.t.Errorf("%s's relay_build_info does not name release %s", p.name, relay.Version())
			}
		}
	}
}

// lineWith is the first line of s that contains sub ("" when none does).
func lineWith(s, sub string) string {
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			return line
		}
	}
	return ""
}

// sameCards fails unless a and b (both live) serve the same card for every
// destination, but for the fields that move with time: sequence (the destination
// channel's last event) and last_delivery (its last write) move with every delivery,
// lag with every event stored and delivered, replayable_from with the clock (now −
// dedup_window). Both are read again while they differ, for 5 s: a failure in between
// may change a card.
func (r *roll) sameCards(a, b *replica) {
	t := r.t
	t.Helper()
	read := func(p *replica, d *rollDest) (map[string]any, string) {
		ans := httpDo(t, http.MethodGet, p.api+d.cardPath(), rollAdminToken)
		if ans.status != http.StatusOK {
			t.Fatalf("%s's card on %s: %d %s", d.id, p.name, ans.status, ans.body)
		}
		card := decodeAs[map[string]any](t, ans)
		for _, moving := range []string{"sequence", "last_delivery", "lag", "replayable_from"} {
			delete(card, moving)
		}
		return card, ans.body
	}
	for _, d := range r.dests {
		var bodyA, bodyB string
		if !waitFor(5*time.Second, func() bool {
			var cardA, cardB map[string]any
			cardA, bodyA = read(a, d)
			cardB, bodyB = read(b, d)
			r.dropAdded(a, cardA, b, cardB)
			r.dropAdded(b, cardB, a, cardA)
			return reflect.DeepEqual(cardA, cardB)
		}) {
			t.Fatalf("%s's card differs between %s and %s (sequence, last_delivery, lag and replayable_from aside, and the fields this release adds):\n%s: %s\n%s: %s",
				d.id, a.name, b.name, a.name, bodyA, b.name, bodyB)
		}
	}
}

// rollAddedCardFields are the card's fields this release adds (CHANGELOG.md, Added): a
// replica of the previous release does not have them, so during a roll a card from it
// lacks them. Every other field must be the same from either release.
var rollAddedCardFields = []string{"in_flight", "max_rate"}

// rollAddedSetupFields are the fields this release adds inside the card's setup (the
// role's forms, issue 55): the same holds of them.
var rollAddedSetupFields = []string{"cloudformation", "terraform", "aws_cli", "quick_create_url"}

// dropAdded takes out of p's card, when p runs this release and other the previous one,
// the fields this release adds that other's card lacks, in the card and in its setup.
func (r *roll) dropAdded(p *replica, card map[string]any, other *replica, otherCard map[string]any) {
	if p.bin != r.newBin || other.bin != r.oldBin {
		return
	}
	for _, f := range rollAddedCardFields {
		if _, ok := otherCard[f]; !ok {
			delete(card, f)
		}
	}
	setup, _ := card["setup"].(map[string]any)
	otherSetup, _ := otherCard["setup"].(map[string]any)
	for _, f := range rollAddedSetupFields {
		if _, ok := otherSetup[f]; !ok && setup != nil {
			delete(setup, f)
		}
	}
}

// waitDelivering waits until an event of each account confirmed from now on has
// reached every destination of the account.
func (r *roll) waitDelivering(when string) {
	t := r.t
	t.Helper()
	mark := r.pub.count()
	next := map[string]string{} // account → its first event confirmed after mark
	r.waitUntil(30*time.Second, "the publisher's next events of each account "+when, func() bool {
		for _, e := range r.pub.confirmedIDs()[mark:] {
			if next[e.account] == "" {
				next[e.account] = e.id
			}
		}
		return len(next) == 2
	})
	for _, d := range r.dests {
		r.waitUntil(30*time.Second, fmt.Sprintf("%s delivering %s", d.id, when), func() bool {
			return slices.Contains(d.arrivals(), next[d.account])
		})
	}
}

// checkKept checks, on every live replica, what the customers made on the old ones:
// the console session still signs its holder in, and the API's destinations are
// listed, active and managed by the API (their deliveries are finish's to check).
func (r *roll) checkKept() {
	t := r.t
	t.Helper()
	for _, p := range r.live() {
		who := httpDo(t, http.MethodGet, p.api+"/v1/whoami", r.session)
		if who.status != http.StatusOK || !strings.Contains(who.body, `"scope":"account:acct_1"`) || !strings.Contains(who.body, `"session":true`) {
			t.Errorf("the session opened on %s, on %s: %d %s; want acct_1's session", r.sessionOn, p.name, who.status, who.body)
		}
		for _, d := range r.dests {
			if !d.madeByAPI {
				continue
			}
			token := rollAdminToken
			if d.account == "acct_1" {
				token = r.session // the console's session lists its account's own
			}
			list := httpDo(t, http.MethodGet, p.api+"/v1/connectors/"+d.connector+"/destinations", token)
			var cards struct{ Destinations []apiCard }
			if list.status != http.StatusOK || json.Unmarshal([]byte(list.body), &cards) != nil ||
				!slices.ContainsFunc(cards.Destinations, func(c apiCard) bool { return c.ID == d.id && c.ManagedBy == "api" && c.Status == "active" }) {
				t.Errorf("%s's %s list does not hold %s, active and managed by the api: %d %s", p.name, d.connector, d.id, list.status, truncate(list.body))
			}
		}
	}
}

// finish stops the publisher and the channels' watch once every destination delivers
// what followed the roll, then checks every confirmed event at each destination's bus
// in order, the repeats within bounds, the channels' reads sound, and no replica gone
// by itself.
func (r *roll) finish() {
	t := r.t
	t.Helper()
	r.waitDelivering("after the roll")
	r.pub.stop(t)
	reads := r.watch.stop()
	r.checkNoneExitedAlone()
	for _, p := range r.replicas {
		if reads[p.name] == 0 {
			t.Errorf("the channels' watch read nothing from %s", p.name)
		}
	}
	t.Logf("%d events confirmed (%d unconfirmed), %d handovers, %d channel reads (%d answered 410), %d channel events checked",
		len(r.pub.confirmedIDs()), len(r.pub.unconfirmedIDs()), r.stops, r.watch.reads, r.watch.expired, r.watch.events)

	want := map[string][]string{}    // account → its confirmed events, in the confirmed order
	byStore := map[string][]string{} // account and store → its confirmed events, in order
	published := map[string]bool{}
	for _, e := range r.pub.confirmedIDs() {
		want[e.account] = append(want[e.account], e.id)
		byStore[e.account+" "+e.store] = append(byStore[e.account+" "+e.store], e.id)
		published[e.account+" "+e.id] = true
	}
	for _, id := range r.pub.unconfirmedIDs() {
		published["acct_1 "+id], published["acct_2 "+id] = true, true // may or may not be stored
	}
	for _, d := range r.dests {
		if !waitFor(60*time.Second, func() bool { return hasAll(d.arrivals(), want[d.account]) }) {
			got := map[string]bool{}
			for _, id := range d.arrivals() {
				got[id] = true
			}
			missing := slices.DeleteFunc(slices.Clone(want[d.account]), func(id string) bool { return got[id] })
			t.Errorf("%s: %d of %d confirmed events missing, the first %s", d.id, len(missing), len(want[d.account]), missing[0])
			continue
		}
		all := d.arrivals()
		firsts, repeats, foreign := []string{}, []string{}, 0
		seen := map[string]bool{}
		for _, id := range all {
			switch {
			case !published[d.account+" "+id]:
				foreign++
			case seen[id]:
				repeats = append(repeats, id)
			default:
				seen[id] = true
				firsts = append(firsts, id)
			}
		}
		// Order is per ordering key (the store): each store's events first arrived in
		// the publisher's confirmed order.
		for key, ids := range byStore {
			if acct, _, _ := strings.Cut(key, " "); acct != d.account {
				continue
			}
			if n := outOfOrder(ids, firsts); n > 0 {
				t.Errorf("%s: %d of %s's %d events first arrived out of the publisher's confirmed order", d.id, n, key, len(ids))
			}
		}
		if most := rollRepeatsMax * r.stops; len(repeats) > most {
			t.Errorf("%s: %d events written again, want at most %d (%d × %d handovers)", d.id, len(repeats), most, rollRepeatsMax, r.stops)
		}
		if foreign > 0 {
			t.Errorf("%s: %d writes of events its account was never sent", d.id, foreign)
		}
		t.Logf("%s: %d events, %d written again %v", d.id, len(firsts), len(repeats), repeats)
	}
	for _, e := range r.watch.errors() {
		t.Error(e)
	}
}

// logTails is the last lines each replica logged, for a failure message.
func (r *roll) logTails() string {
	const most = 40
	var b strings.Builder
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.replicas {
		lines := strings.Split(strings.TrimSpace(p.logs.String()), "\n")
		state := "live"
		if p.gone() {
			state = fmt.Sprintf("exited: %v", p.exitErr)
		}
		fmt.Fprintf(&b, "--- %s (%s), last %d lines:\n%s\n", p.name, state, most, strings.Join(lines[max(0, len(lines)-most):], "\n"))
	}
	return b.String()
}

// busArrivals reads the EventBridge bus named name.
func (r *roll) busArrivals(name string) func() []string {
	return func() []string {
		var ids []string
		for _, e := range r.bus.Entries() {
			if strings.HasSuffix(e.EventBusName, "event-bus/"+name) {
				var body struct {
					EventID string `json:"event_id"`
				}
				if err := json.Unmarshal([]byte(e.Detail), &body); err != nil {
					r.t.Fatalf("detail %q: %v", e.Detail, err)
				}
				ids = append(ids, body.EventID)
			}
		}
		return ids
	}
}

// streamArrivals reads the kinesalite stream name.
func (r *roll) streamArrivals(name string) func() []string {
	return func() []string {
		var ids []string
		for _, rec := range awstest.Records(r.t, r.kinesalite, name) {
			var body struct {
				EventID string `json:"event_id"`
			}
			if err := json.Unmarshal(rec.Data, &body); err != nil {
				r.t.Fatalf("record %q: %v", rec.Data, err)
			}
			ids = append(ids, body.EventID)
		}
		return ids
	}
}

// topicArrivals reads what pstest took on the topic.
func (r *roll) topicArrivals(topic string) func() []string {
	name := "projects/acme-prod/topics/" + topic
	return func() []string {
		var ids []string
		for _, m := range r.ps.Messages() {
			if m.Topic == name {
				ids = append(ids, m.Attributes["event_id"])
			}
		}
		return ids
	}
}

// rollPublisher publishes one event every interval, alternately for acct_1's tenant and
// acct_2's, each waited for the broker's confirm, so the confirmed order is the order
// of publishing.
type rollPublisher struct {
	halt, done chan struct{}
	halting    sync.Once

	mu          sync.Mutex
	confirmed   []publishedEvent
	unconfirmed []string // published, never confirmed: stored or not, no check counts them
	err         error
}

// publishedEvent is a confirmed event, the account its tenant routes to and its store:
// the ordering key, within which the bus must see the confirmed order.
type publishedEvent struct{ id, account, store string }

// rollStores is how many stores each account's events name.
const rollStores = 10

func startRollPublisher(t *testing.T, ch *amqp.Channel, exchange string, interval time.Duration) *rollPublisher {
	key, _ := hex.DecodeString(testKeyHex)
	p := &rollPublisher{halt: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-p.halt:
				return
			case <-tick.C:
			}
			tenant, account := "t1", "acct_1"
			if i%2 == 1 {
				tenant, account = "t2", "acct_2"
			}
			// Ten stores an account: keys whose writes overlap in a 0.3.0 replica's window.
			storeID := fmt.Sprintf("store-%d", (i/2)%rollStores)
			job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-4343-7000-8000-%012d", i), Status: "completed", Tenant: tenant, StoreID: storeID}
			dc, err := ch.PublishWithDeferredConfirm(exchange, job.RoutingKey(), false, false, jobevent.Build(job, exchange, key, time.Now()))
			if err != nil {
				p.mu.Lock()
				p.err = fmt.Errorf("publish %d: %w", i, err)
				p.mu.Unlock()
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			acked, err := dc.WaitContext(ctx)
			cancel()
			p.mu.Lock()
			if acked && err == nil {
				p.confirmed = append(p.confirmed, publishedEvent{job.EventID(), account, storeID})
			} else {
				p.unconfirmed = append(p.unconfirmed, job.EventID())
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.end)
	return p
}

// end ends the publishing and waits until the last publish settled.
func (p *rollPublisher) end() {
	p.halting.Do(func() { close(p.halt) })
	<-p.done
}

// stop ends the publishing, failing the test if a publish failed.
func (p *rollPublisher) stop(t *testing.T) {
	t.Helper()
	p.end()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		t.Fatal(p.err)
	}
}

func (p *rollPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.confirmed)
}

func (p *rollPublisher) confirmedIDs() []publishedEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.confirmed)
}

func (p *rollPublisher) unconfirmedIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.unconfirmed)
}

// previousRelease is the release this one rolls over, as this build knows it.
func previousRelease() upgrade.Release {
	known := upgrade.Releases(relay.Version())
	return known[len(known)-2]
}

// rollLatency is how late every bus of the roll answers.
const rollLatency = 20 * time.Millisecond

// lateProxy puts a proxy in front of addr (host:port, or a URL) whose answers arrive
// rollLatency late, and returns its host:port.
func lateProxy(t *testing.T, addr string) string {
	t.Helper()
	p, err := netdelay.Listen("127.0.0.1:0", strings.TrimPrefix(addr, "http://"), rollLatency)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Addr()
}
