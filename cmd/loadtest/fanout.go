package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/benchkit"
	"github.com/mercamap/relay/internal/destination"
)

// fanOutConns caps the bare fan-out's connections to the bus and its writes in flight:
// one writer per destination up to this many (10,000 writers with a connection each would
// hold 20,000 descriptors in this process, bus side included); beyond it each of this
// many writers owns every fanOutConns-th destination and writes their events in turn.
// More goroutines than connections would only queue inside the HTTP transport (100,000
// of them held 7 GB in this process), not write faster: the two cores bound the rate.
const fanOutConns = 1024

// fanOut is the bare fan-out of a many-destination row: one writer per destination (up to
// fanOutConns), each writer with its own assumed session, putting the row's events on its own bus of the same
// sandbox EventBridge, one PutEvents entry at a time, the next only after the answer.
// As the relay's sink does (internal/sinks/eventbridge), the writers share one SDK client
// (retries off) and sign each call with their own session, given as a per-call option. No
// broker, no Redis, no relay: the limit of this machine for the row's writes, signed the
// same way.
type fanOut struct {
	prefix string // of every bus of the row's writers
	buses  []string
	creds  []aws.Credentials // each writer's session (writer w: every fanOutConns-th bus from w)
	client *eventbridge.Client
	http   *awshttp.BuildableClient
}

// newFanOut assumes one role per writer on the sandbox STS (each trusting its own
// ExternalId, as in the relay's rows: up to fanOutConns destinations, one per
// destination; beyond, a writer's destinations share its session, which costs a write
// the same signing) and builds the shared client, then warms every bus up with one
// write, so the timed repetitions see live sessions and connections.
func newFanOut(ctx context.Context, r benchRun, idx int, stsURL string, stsH *awstest.STS, bus *remoteBus, key []byte) (*fanOut, error) {
	conns := min(r.dests, fanOutConns)
	f := &fanOut{prefix: fanOutBusPrefix(idx), buses: make([]string, r.dests), creds: make([]aws.Credentials, conns),
		http: awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxConnsPerHost, t.MaxIdleConnsPerHost, t.MaxIdleConns = conns, conns, conns
		})}
	for i := range f.buses {
		f.buses[i] = fmt.Sprintf("%s%d", fanOutBusPrefix(idx), i)
	}
	ours := sts.New(sts.Options{Region: "us-east-1", BaseEndpoint: aws.String(stsURL), HTTPClient: f.http,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDBENCH", "bench-not-a-secret", "")})
	err := writers(ctx, conns, func(w, _ int) error {
		role := fmt.Sprintf("arn:aws:iam::111122223333:role/bench-fanout-%d-%d", idx, w)
		ext := fmt.Sprintf("bench-fanout-%d-%d", idx, w)
		stsH.RequireExternalID(role, ext)
		out, err := ours.AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(role),
			RoleSessionName: aws.String("mercamap-acct_bench"), ExternalId: aws.String(ext), DurationSeconds: aws.Int32(900)})
		if err != nil {
			return fmt.Errorf("assume %s: %w", role, err)
		}
		c := out.Credentials
		f.creds[w] = aws.Credentials{AccessKeyID: aws.ToString(c.AccessKeyId), SecretAccessKey: aws.ToString(c.SecretAccessKey), SessionToken: aws.ToString(c.SessionToken)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	f.client = eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String(bus.url),
		HTTPClient: f.http, Retryer: aws.NopRetryer{}})
	warm := []*event{sizedEvent("bench.fanout", key, 0, r.size)}
	base := bus.count()
	if _, err := f.write(ctx, warm, bus, base); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	return f, nil
}

// run writes evs to every bus, all writers starting together, and measures it: the rate
// is N × E / (start → the bus's last answer), the CPU that of this process (the writers:
// nothing else works in it meanwhile) and of the bus process.
func (f *fanOut) run(ctx context.Context, evs []*event, bus *remoteBus) *bareResult {
	base := bus.count()
	cpu0, bus0 := benchkit.SelfCPU(), procCPU(bus.pid())
	start := time.Now()
	if _, err := f.write(ctx, evs, bus, base); err != nil {
		return &bareResult{err: err.Error()}
	}
	res := &bareResult{loadCPU: benchkit.SelfCPU() - cpu0, busCPU: procCPU(bus.pid()) - bus0}
	_, last, err := bus.latencies(evs, f.prefix)
	if err != nil {
		return &bareResult{err: err.Error()}
	}
	res.perSec = float64(len(evs)*len(f.buses)) / last.Sub(start).Seconds()
	return res
}

// write puts evs, in order and one at a time, on each destination's bus, and waits until
// the bus holds all of them.
func (f *fanOut) write(ctx context.Context, evs []*event, bus *remoteBus, base int) (int, error) {
	for _, e := range evs {
		e.sentAt = time.Now() // no publish here: "sent" is the start of the writes
	}
	err := writers(ctx, len(f.buses), func(w, i int) error {
		session := func(o *eventbridge.Options) {
			o.Credentials = credentials.NewStaticCredentialsProvider(f.creds[w].AccessKeyID, f.creds[w].SecretAccessKey, f.creds[w].SessionToken)
		}
		for _, e := range evs {
			if _, err := f.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
				EventBusName: aws.String(f.buses[i]), Source: aws.String("com.bench.bare"), DetailType: aws.String(e.key),
				Detail: aws.String(bareDetail(fmt.Sprintf("d%d", i), e.key, e.msg)), Time: aws.Time(time.Now())}}}, session); err != nil {
				return fmt.Errorf("PutEvents to %s: %w", f.buses[i], err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	want := len(evs) * len(f.buses)
	if !waitCount(ctx, bus, base, want, 30*time.Second) {
		return 0, fmt.Errorf("%d of %d writes on the bus, then none for 30 s", bus.count()-base, want)
	}
	return want, nil
}

func (f *fanOut) close() { f.http.GetTransport().CloseIdleConnections() }

// bareDetail is what the bare paths put on the bus for an event of msg's headers and
// body at destination dest: the body the relay's sink writes (destination.Message.Body:
// its message id, type, data, event id and time), so that the bus parses as many bytes
// of the same shape for either path. Until issue 46 the bare paths wrote only the event
// id and the data, ~90 bytes fewer a 1 KB event, and the bus spent ~10% less on each.
func bareDetail(dest, typ string, msg amqp.Publishing) string {
	id, _ := msg.Headers["ce-id"].([]byte)
	at, _ := msg.Headers["ce-time"].([]byte)
	return string(destination.Message{ID: destination.MessageID(dest, string(id)), Type: typ, EventID: string(id),
		CreatedAt: string(at), Data: json.RawMessage(msg.Body)}.Body())
}

// writers runs fn(w, i) for i = 0 … n-1 on min(n, fanOutConns) goroutines, goroutine w
// taking i = w, w+fanOutConns, … in turn, and returns the first error.
func writers(ctx context.Context, n int, fn func(w, i int) error) error {
	w := min(n, fanOutConns)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for k := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := k; i < n && ctx.Err() == nil; i += w {
				if err := fn(k, i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
