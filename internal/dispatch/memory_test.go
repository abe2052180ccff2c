package dispatch

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/sinks/eventbridge"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
)

// The memory of idle destinations is measured in this process only: the AWS side (the
// test STS and EventBridge, which keep every request and entry) runs in a child process,
// this test binary run again with awsHelperEnv set.
const awsHelperEnv = "RELAY_DISPATCH_AWS_HELPER"

// memRole and memExternalID are destination i's role and pinned ExternalId.
func memRole(i int) string       { return fmt.Sprintf("arn:aws:iam::111122223333:role/mem-%d", i) }
func memExternalID(i int) string { return fmt.Sprintf("pinned-ext-%d", i) }

// TestAWSHelperProcess is the child process's body, and skips itself otherwise: an STS
// whose role i requires memExternalID(i), and an EventBridge taking only its sessions.
// It prints their URLs and a count of the entries taken on each line of stdin.
func TestAWSHelperProcess(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv(awsHelperEnv))
	if err != nil {
		t.Skip("run by the memory benchmark as its AWS side")
	}
	sts := awstest.NewSTS(t)
	for i := range n {
		sts.RequireExternalID(memRole(i), memExternalID(i))
	}
	eb := awstest.NewEventBridge(t)
	eb.RequireSessionFrom(sts)
	fmt.Printf("%s %s\n", sts.URL, eb.URL)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println(len(eb.Entries()))
	}
}

// awsHelper is the child process, seen from the benchmark.
type awsHelper struct {
	stsURL, busURL string
	ask            io.Writer
	answers        *bufio.Scanner
}

func startAWSHelper(b *testing.B, n int) *awsHelper {
	cmd := exec.Command(os.Args[0], "-test.run=^TestAWSHelperProcess$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", awsHelperEnv, n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	h := &awsHelper{ask: stdin, answers: bufio.NewScanner(stdout)}
	if !h.answers.Scan() {
		b.Fatal("the AWS helper process printed no URLs")
	}
	if _, err := fmt.Sscan(h.answers.Text(), &h.stsURL, &h.busURL); err != nil {
		b.Fatalf("AWS helper: %q: %v", h.answers.Text(), err)
	}
	return h
}

// entries is how many entries the helper's EventBridge has taken.
func (h *awsHelper) entries(b *testing.B) int {
	fmt.Fprintln(h.ask)
	if !h.answers.Scan() {
		b.Fatal("the AWS helper process ended")
	}
	n, _ := strconv.Atoi(h.answers.Text())
	return n
}

// memory is what the Go runtime holds: live heap objects and goroutine stacks, after a GC.
func memory() (heap, stacks uint64, goroutines int) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64(), runtime.NumGoroutine()
}

// BenchmarkIdleDestinations holds 10,000 EventBridge destinations the way `relay serve`
// does (the real sink, each destination's own probed and assumed session), delivers one
// event to each, then reports what the idle destinations hold in this process: live heap
// and goroutine stacks per destination, and goroutines. The 10,000-destination row of
// `make bench` is the same, measured as the relay's RSS.
func BenchmarkIdleDestinations(b *testing.B) {
	const n = 10000
	for b.Loop() {
		heap, stacks, goroutines := idleDestinations(b, n)
		b.ReportMetric(float64(heap)/n, "heap-B/dest")
		b.ReportMetric(float64(stacks)/n, "stack-B/dest")
		b.ReportMetric(float64(goroutines)/n, "goroutines/dest")
	}
}

// idleDestinations runs n destinations until each has taken one event and is idle, and
// returns the heap, stacks and goroutines they added.
func idleDestinations(b *testing.B, n int) (heap, stacks uint64, goroutines int) {
	aws := startAWSHelper(b, n)
	st, err := store.Open(testpeer.RedisURL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	dests := make([]destination.Destination, n)
	for i := range dests {
		dests[i] = destination.Destination{ID: fmt.Sprintf("d%d", i), Account: "acct_mem", Connector: destination.EventBridge,
			BusARN: fmt.Sprintf("arn:aws:events:us-east-1:111122223333:event-bus/mem-%d", i), RoleARN: memRole(i),
			PinnedExternalID: memExternalID(i)}
	}
	heap0, stacks0, goroutines0 := memory()

	own := awsConfig()
	assumer := assume.New(assume.Options{STS: assume.NewSTSClient(own, aws.stsURL), IdentityName: "mercamap"})
	sink := eventbridge.New(eventbridge.Options{AWS: own, Assumer: assumer, IdentityName: "mercamap", Endpoint: aws.busURL})
	cfg := delivery()
	cfg.LeaseTTL = 15 * time.Second
	cfg.SetupCheck.Initial, cfg.SetupCheck.Max = 50*time.Millisecond, time.Second
	d := New(Options{Store: st, Delivery: cfg, Sinks: map[destination.Connector]Sink{destination.EventBridge: sink}})
	if err := d.SetDestinations(ctx, dests); err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	if _, err := st.AppendBatch(ctx, []store.Append{{Accounts: []string{"acct_mem"}, Entry: store.Entry{
		EventID: "ev-1", Type: "job.completed", Time: time.Now().UTC().Format(time.RFC3339Nano),
		Data: []byte(`{"jobId":"j","metadata":{"store_id":"st_1"},"status":"completed","pad":"` + strings.Repeat("x", 900) + `"}`)}}},
		time.Hour, time.Hour); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for aws.entries(b) < n {
		if time.Now().After(deadline) {
			b.Fatalf("after 5 minutes the bus had %d of %d entries", aws.entries(b), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Idle: every pass over (the pool's goroutines end when no worker is queued).
	for d.serving() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a poll interval and more: the destinations are idle, not winding down
	heap1, stacks1, goroutines1 := memory()
	return heap1 - min(heap0, heap1), stacks1 - min(stacks0, stacks1), goroutines1 - goroutines0
}

// awsConfig is our own identity for the benchmark: static keys, SDK retries off.
func awsConfig() aws.Config {
	return aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDMEM", "mem", ""),
		Retryer: func() aws.Retryer { return aws.NopRetryer{} }}
}
