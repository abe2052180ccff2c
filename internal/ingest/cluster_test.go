package ingest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
)

// confirmedPublisher publishes jobs one at a time, as the Worker does: it waits for each
// confirm, and on any failure reconnects (to the next of urls) and publishes the same
// job again. It returns the event ids in the order the broker confirmed them.
func confirmedPublisher(ctx context.Context, urls []string, exchange string, key []byte, jobs []jobevent.Job) []string {
	var confirmed []string
	node := 0
	for i := 0; i < len(jobs) && ctx.Err() == nil; {
		conn, err := amqp.DialConfig(urls[node%len(urls)], amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		node++
		if err != nil {
			time.Sleep(50 * time.Millisecond) // a dead node: try the next one shortly
			continue
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		for err == nil && i < len(jobs) && ctx.Err() == nil {
			var dc *amqp.DeferredConfirmation
			dc, err = ch.PublishWithDeferredConfirm(exchange, jobs[i].RoutingKey(), false, false,
				jobevent.Build(jobs[i], exchange, key, time.Now()))
			if err != nil {
				break
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ok, werr := dc.WaitContext(wctx)
			cancel()
			switch {
			case werr != nil:
				err = werr
			case !ok:
				err = fmt.Errorf("nacked")
			default:
				confirmed = append(confirmed, jobs[i].EventID())
				i++
			}
		}
		conn.Close()
	}
	return confirmed
}

// inOrder reports the first place where log (event ids, first arrivals) departs from the
// confirmed order, or "" when every confirmed event is there exactly once, in that order.
func inOrder(log []string, confirmed []string) string {
	seen := map[string]int{}
	for _, id := range log {
		seen[id]++
	}
	for _, id := range confirmed {
		if seen[id] != 1 {
			return fmt.Sprintf("%s stored %d times", id, seen[id])
		}
	}
	want := map[string]bool{}
	for _, id := range confirmed {
		want[id] = true
	}
	k := 0
	for _, id := range log {
		if !want[id] {
			continue
		}
		if id != confirmed[k] {
			return fmt.Sprintf("log entry %d of the confirmed ones is %s, the publisher's order puts %s there", k, id, confirmed[k])
		}
		k++
	}
	return ""
}

func TestRelaySurvivesTheKillOfTheNodeLeadingItsQueue(t *testing.T) {
	cluster := testpeer.SharedRabbitCluster(t)
	r := newRig(t, cluster.URLs()[0], testpeer.RedisURL(t), "relay-test-cluster-kill")
	if err := Declare(cluster.URLs()[0], r.topo); err != nil {
		t.Fatal(err)
	}
	leader := cluster.Leader(t, r.topo.Queue)
	// The relay connects to the leader's node first, the publisher to the others: the
	// kill takes the relay's connection and the queue's leader at once.
	others := []string{cluster.URLs()[(leader+1)%3], cluster.URLs()[(leader+2)%3]}
	r.amqpURL = others[0] // for the rig's own channels and cleanup
	r.opts.URLs = append([]string{cluster.URLs()[leader]}, others...)
	r.opts.Prefetch = 32
	r.start()

	const total = 500
	jobs := make([]jobevent.Job, total)
	for i := range jobs {
		jobs[i] = jobevent.Job{ID: fmt.Sprintf("0190f2a4-3333-7000-8000-%012d", i), Status: "completed"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan []string, 1)
	go func() { done <- confirmedPublisher(ctx, others, r.topo.Exchange, r.key, jobs) }()

	waittest.For(t, 60*time.Second, "some events stored", func() bool { return len(r.log()) >= 100 })
	cluster.KillNode(t, leader)
	t.Cleanup(func() { cluster.StartNode(t, leader) }) // the next test finds three nodes
	confirmed := <-done
	if len(confirmed) != total {
		t.Fatalf("the publisher got %d of %d confirms", len(confirmed), total)
	}
	waittest.For(t, 90*time.Second, "every confirmed event stored", func() bool { return len(r.log()) >= total })
	var ids []string
	for _, e := range r.log() {
		ids = append(ids, e.EventID)
	}
	if why := inOrder(ids, confirmed); why != "" {
		t.Fatal(why)
	}
	if n := testutil.ToFloat64(r.metrics.ConnectionLosses); n < 1 {
		t.Errorf("connection losses = %v: the relay was not on the killed node", n)
	}
	if now := cluster.Leader(t, r.topo.Queue); now == leader {
		t.Errorf("the queue is still led by the killed node %d", leader)
	}
}

func TestPartitionsKeepEachTenantsOrderAcrossReplicas(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-partitions")
	const tenants, partitions = 12, 3
	router := tenantRouter{}
	for i := range tenants {
		router[fmt.Sprintf("tenant-%d", i)] = fmt.Sprintf("acct_t%d", i)
	}
	r.topo.Partitions = partitions
	r.opts.Topology = r.topo
	r.opts.Router = router
	r.opts.Prefetch = 16
	r.opts.Rebalance = 200 * time.Millisecond
	r.start() // replica a: alone, it is the active consumer of every partition

	ch := r.channel()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	const total = 1800
	want := map[string][]string{} // account -> event ids in publish order
	publish := func(from, to int) {
		t.Helper()
		var confirms []*amqp.DeferredConfirmation
		for i := from; i < to; i++ {
			tenant := fmt.Sprintf("tenant-%d", i%tenants)
			job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-4444-7000-8000-%012d", i), Status: "completed", Tenant: tenant}
			dc, err := ch.PublishWithDeferredConfirm(r.topo.Exchange, job.RoutingKey(), false, false, jobevent.Build(job, r.topo.Exchange, r.key, time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			confirms = append(confirms, dc)
			want[router[tenant]] = append(want[router[tenant]], job.EventID())
		}
		for _, dc := range confirms {
			if !dc.Wait() {
				t.Fatal("publish not confirmed")
			}
		}
	}
	stored := func() int {
		n := 0
		for _, acct := range router {
			entries, err := r.store.ReadLog(context.Background(), acct, "0", 100000)
			if err != nil {
				t.Fatal(err)
			}
			n += len(entries)
		}
		return n
	}
	publish(0, total/3)

	// Replica b joins while events flow: replica a must hand it partitions.
	b := New(func() Options { o := r.opts; o.Metrics = NewMetrics(nil); return o }())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = b.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	waittest.For(t, 30*time.Second, "replica b connected", b.Connected)
	for k := 1; k < 3; k++ { // the rest in slices, paced so that rebalancing rounds happen meanwhile
		publish(k*total/3, (k+1)*total/3)
		if k == 1 {
			waittest.For(t, 30*time.Second, "replica a hands a partition over", func() bool {
				return testutil.ToFloat64(r.metrics.PartitionHandovers) >= 1
			})
		}
	}
	waittest.For(t, 60*time.Second, "every event stored", func() bool { return stored() == total })

	for acct, ids := range want {
		entries, err := r.store.ReadLog(context.Background(), acct, "0", 100000)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.EventID)
		}
		if !slices.Equal(got, ids) {
			t.Errorf("%s: log is not the publish order (%d entries, %d published): %s", acct, len(got), len(ids), inOrder(got, ids))
		}
	}
	bm := b.opts.Metrics
	if testutil.ToFloat64(bm.Stored) == 0 {
		t.Errorf("replica b stored nothing: the partitions did not spread")
	}
	if a := testutil.ToFloat64(r.metrics.PartitionsActive); a > 2 {
		t.Errorf("replica a is active on %v partitions, more than its share of 2", a)
	}
}
