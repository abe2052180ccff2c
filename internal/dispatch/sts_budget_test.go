package dispatch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/sinks/eventbridge"
)

// TestReactivatingARoleThatLacksPutEventsSpendsOnlyTheSTSBudget is issue 22's attack 4,
// its window and rates scaled down: two destinations of one account name roles whose
// permissions lack events:PutEvents, and the account re-activates them through the
// dispatcher as fast as it can (no API rate limit in the way) while events keep
// arriving. Every refused write drops its session, so on the old code each write cost a
// probe and a session and STS, which throttles per calling principal, throttled us.
// Now at most the budget's calls reach STS for each destination and for the account,
// STS throttles nobody, and another account's destination, added during the loop (so it
// needs a probe and a session of its own), delivers every event throughout.
func TestReactivatingARoleThatLacksPutEventsSpendsOnlyTheSTSBudget(t *testing.T) {
	const window = 12 * time.Second
	budget := config.STSBudget{PerDestination: config.Rate{Count: 4, Per: 5 * time.Second},
		PerAccount: config.Rate{Count: 6, Per: 5 * time.Second}}
	sts := awstest.NewSTS(t)
	sts.ThrottleAbove(20, time.Second) // our principal's AssumeRole rate, scaled down with the window
	eb := awstest.NewEventBridge(t)
	eb.RequireSessionFrom(sts)
	ours := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", "")}
	metrics := assume.NewMetrics(nil)
	a := assume.New(assume.Options{STS: assume.NewSTSClient(ours, sts.URL), IdentityName: "mercamap", Budget: budget,
		// A session backoff this short leaves the budget alone to hold the loop back.
		Backoff: config.Backoff{Initial: time.Millisecond, Max: time.Millisecond}, Metrics: metrics})
	sink := eventbridge.New(eventbridge.Options{AWS: ours, Assumer: a, IdentityName: "mercamap", Endpoint: eb.URL})

	loops := []destination.Destination{bus("loop-1", "111122223333"), bus("loop-2", "111122224444")}
	for i := range loops {
		loops[i].PinnedExternalID = fmt.Sprintf("ext-loop-%d", i)
		sts.RequireExternalID(loops[i].RoleARN, loops[i].PinnedExternalID) // the trust policy is right
		sts.SetPermissionsPolicy(loops[i].RoleARN,                         // but the role may not write to the bus
			`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"events:DescribeEventBus","Resource":"*"}]}`)
	}
	other := bus("orders", "555566667777")
	other.Account, other.PinnedExternalID = "acct_2", "ext-orders"
	sts.RequireExternalID(other.RoleARN, other.PinnedExternalID)

	r := newRig(t, newTestSink(nil), loops...)
	r.d.opts.Sinks[destination.EventBridge] = sink
	r.d.opts.Delivery.DisableAfter, r.d.opts.Delivery.WarnAfter = 3, []int{2} // disabled quickly, so activations matter
	started := time.Now()
	r.start()

	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	var wg sync.WaitGroup
	var activations atomic.Int64
	wg.Add(1)
	go func() { // the Fetcher Worker keeps publishing for the looping account
		defer wg.Done()
		for ctx.Err() == nil {
			if _, err := r.publishTo(acct, "job.completed", "job.completed", "job.completed", "job.completed"); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(5 * time.Millisecond) // a steady stream, not a hot loop on Redis
		}
	}()
	for _, d := range loops {
		wg.Add(1)
		go func() { // the account token, re-activating as fast as it can
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := r.d.Activate(ctx, d.ID, false); err == nil {
					activations.Add(1)
				}
			}
		}()
	}

	// A few seconds into the loop another account's destination is added: its setup check
	// and its session need STS while the loop runs.
	select {
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
	}
	if err := r.d.SetDestinations(context.Background(), append(loops[:2:2], other)); err != nil {
		t.Fatal(err)
	}
	var published []string
	var publishedAt []time.Time
	for ctx.Err() == nil {
		ids, err := r.publishTo(other.Account, "job.completed")
		if err != nil {
			t.Fatal(err)
		}
		published, publishedAt = append(published, ids...), append(publishedAt, time.Now())
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	wg.Wait()
	calls := sts.Calls()
	_, throttled := sts.CallsBy()
	elapsed := time.Since(started) // after the count: the budget had at most this long to refill
	arrived := otherArrived(t, eb, other.BusARN)

	// At most the budget: a full bucket, then its even refill over the window.
	allowed := func(rate config.Rate) int {
		return rate.Count + int(float64(rate.Count)*elapsed.Seconds()/rate.Per.Seconds())
	}
	total := 0
	for _, d := range loops {
		total += calls[d.RoleARN]
		if n := calls[d.RoleARN]; n > allowed(budget.PerDestination) {
			t.Errorf("%s: %d AssumeRole calls in %s, want at most the budget's %d", d.ID, n, elapsed.Round(time.Millisecond), allowed(budget.PerDestination))
		}
	}
	if total > allowed(budget.PerAccount) {
		t.Errorf("account %s: %d AssumeRole calls in %s, want at most the budget's %d", acct, total, elapsed.Round(time.Millisecond), allowed(budget.PerAccount))
	}
	if throttled["AKIDOURS"] != 0 {
		t.Errorf("STS throttled our principal %d times", throttled["AKIDOURS"])
	}
	// Every event of the other account published up to 3 s before the loop ended had
	// arrived by then: it kept delivering throughout, not only once the loop stopped.
	for i, id := range published {
		if publishedAt[i].Before(started.Add(elapsed-3*time.Second)) && !arrived[id] {
			t.Errorf("the other account's %s, published %s into the loop, had not arrived when it ended",
				id, publishedAt[i].Sub(started).Round(time.Millisecond))
		}
	}
	t.Logf("in %s: %d activations, STS calls %v (our principal throttled %d times), %d of the other account's %d events arrived",
		elapsed.Round(time.Millisecond), activations.Load(), calls, throttled["AKIDOURS"], len(arrived), len(published))

	waitFor(t, "the rest of the other account's events", func() bool { return len(otherArrived(t, eb, other.BusARN)) >= len(published) })
	if st := r.state("loop-1"); st.ConsecutiveFailures > 3 {
		t.Errorf("loop-1 counts %d rejections in a row, want at most disable_after: a held-back write is not taken", st.ConsecutiveFailures)
	}
	r.stop()
	if got, want := testutil.ToFloat64(metrics.Calls.WithLabelValues("probe"))+testutil.ToFloat64(metrics.Calls.WithLabelValues("session")),
		float64(len(sts.Requests())); got != want {
		t.Errorf("relay_sts_calls_total = %v, STS saw %v", got, want)
	}
	if n := testutil.ToFloat64(metrics.Throttled.WithLabelValues("session")) + testutil.ToFloat64(metrics.Throttled.WithLabelValues("probe")); n != 0 {
		t.Errorf("relay_sts_throttled_total = %v, want 0", n)
	}
}

// otherArrived is the set of event ids the bus at busARN took.
func otherArrived(t *testing.T, eb *awstest.EventBridge, busARN string) map[string]bool {
	t.Helper()
	ids, err := eb.EventIDs(busARN)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, id := range ids {
		got[id] = true
	}
	return got
}
