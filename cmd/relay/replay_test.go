package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
)

func TestDestinationsReplayAndActivateSinceCallTheAPI(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	r.Start()
	ids := r.Publish(apitest.Acct1, 3)
	apitest.WaitFor(t, 20*time.Second, "3 deliveries", func() bool { return len(r.Sink.Delivered("orders-bus")) == 3 })
	env := getenv(map[string]string{"RELAY_TOKEN": apitest.Acct1Token})
	var out, errOut bytes.Buffer
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if err := run(context.Background(), []string{"destinations", "replay", "orders-bus", "--from", from, "--api", r.URL}, env, nil, &out, &errOut); err != nil {
		t.Fatalf("replay: %v\n%s", err, errOut.String())
	}
	apitest.WaitFor(t, 20*time.Second, "the replay", func() bool { return len(r.Sink.Delivered("orders-bus")) >= 6 })
	if got := r.Sink.Delivered("orders-bus"); !slices.Equal(got, slices.Concat(ids, ids)) {
		t.Fatalf("delivered %v, want %v twice", got, ids)
	}
	old := time.Now().Add(-apitest.LogRetention - time.Hour).UTC().Format(time.RFC3339)
	err := run(context.Background(), []string{"destinations", "replay", "orders-bus", "--from", old, "--api", r.URL}, env, nil, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "oldest point still replayable") {
		t.Fatalf("replay older than the log: %v", err)
	}

	// Paused, 2 events arrive, activated since_paused: they are delivered.
	if a := httpDo(t, "POST", r.URL+"/v1/connectors/eventbridge/destinations/orders-bus/pause", apitest.Acct1Token); a.status != 200 {
		t.Fatalf("pause: %d", a.status)
	}
	missed := r.Publish(apitest.Acct1, 2)
	out.Reset()
	if err := run(context.Background(), []string{"destinations", "activate", "orders-bus", "--replay", "since_paused", "--api", r.URL}, env, nil, &out, &errOut); err != nil {
		t.Fatalf("activate: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "orders-bus: active") {
		t.Errorf("activate printed %q", out.String())
	}
	apitest.WaitFor(t, 20*time.Second, "the events missed while paused", func() bool {
		return slices.Contains(r.Sink.Delivered("orders-bus"), missed[1])
	})
}
