package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mercamap/relay/internal/awstest"
)

func TestParseLatency(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		in   string
		want busLatency
	}{
		{"", busLatency{}},
		{"100ms", busLatency{busEventBridge: 100 * ms, busKinesis: 100 * ms, busPubSub: 100 * ms}},
		{"eventbridge=100ms, kinesis=20ms", busLatency{busEventBridge: 100 * ms, busKinesis: 20 * ms}},
		{"20ms,PubSub=250ms", busLatency{busEventBridge: 20 * ms, busKinesis: 20 * ms, busPubSub: 250 * ms}},
		{"100ms,kinesis=0s", busLatency{busEventBridge: 100 * ms, busPubSub: 100 * ms}},
	} {
		got, err := parseLatency(c.in)
		if err != nil || len(got) != len(c.want) {
			t.Errorf("parseLatency(%q) = %v, %v; want %v", c.in, got, err, c.want)
			continue
		}
		for bus, d := range c.want {
			if got[bus] != d {
				t.Errorf("parseLatency(%q)[%s] = %s, want %s", c.in, bus, got[bus], d)
			}
		}
	}
	for in, says := range map[string]string{
		"sqs=100ms":                  `no bus "sqs"`,
		"100":                        `"100" is not a duration`,
		"eventbridge=-1ms":           "out of range",
		"1m":                         "out of range",
		"eventbridge=1ms,,pubsub=2s": "an empty item",
		"pubsub=1ms,pubsub=2ms":      "pubsub named twice",
		"10ms,20ms":                  "a second delay for every bus",
	} {
		_, err := parseLatency(in)
		if err == nil || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), "eventbridge=100ms,pubsub=20ms") {
			t.Errorf("parseLatency(%q): %v; want an error saying %q and the form wanted", in, err, says)
		}
	}
	if err := run(t.Context(), []string{"--latency", "kinesis=20ms"}, func(string) string { return "" }, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "--kinesalite") {
		t.Errorf("--latency for Kinesis without --kinesalite: %v; want it refused", err)
	}
}

// TestBusesAnswerLate: with --latency, what the relay's config names answers that late:
// EventBridge and the Kinesis front (HTTP) and Pub/Sub (gRPC); STS and the admin API,
// and the sandbox's own reading of its buses, answer at once.
func TestBusesAnswerLate(t *testing.T) {
	const late = 150 * time.Millisecond
	b := start(t, awstest.StartKinesalite(t), "--latency", "eventbridge=150ms,kinesis=150ms,pubsub=150ms")
	if out := b.out.String(); strings.Count(out, "answers 150ms late (--latency)") != 3 {
		t.Errorf("the sandbox's start does not say each bus answers late:\n%s", out)
	}
	timed := func(what string, f func() error) time.Duration {
		t.Helper()
		start := time.Now()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return time.Since(start)
	}
	get := func(addr, path string) func() error {
		return func() error {
			resp, err := http.Get("http://" + addr + path)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			return err
		}
	}
	b.post(t, "/topics", map[string]any{"project": "relay-demo", "topic": "late"}, nil) // not late: the sandbox's own client
	ps, err := vkit.NewTopicAdminClient(t.Context(), option.WithEndpoint(b.pubsub), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Close()
	for range 2 { // a kept-alive connection is as late as the first
		for what, f := range map[string]func() error{
			"EventBridge": get(b.events, "/"),
			"Kinesis":     get(b.kinesis, "/"),
			"Pub/Sub": func() error {
				_, err := ps.GetTopic(t.Context(), &pubsubpb.GetTopicRequest{Topic: "projects/relay-demo/topics/late"})
				return err
			},
		} {
			if took := timed(what, f); took < late || took > late+time.Second {
				t.Errorf("%s answered in %s; want about %s", what, took, late)
			}
		}
		for what, f := range map[string]func() error{"STS": get(b.sts, "/"), "admin": get(b.admin, "/healthz"), "GET /arrived": get(b.admin, "/arrived")} {
			if took := timed(what, f); took >= late {
				t.Errorf("%s answered in %s; want it at once", what, took)
			}
		}
	}
}
