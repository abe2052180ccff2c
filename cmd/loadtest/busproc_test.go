package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/destination"
)

// The bench's bus, written to by the real SDK: it stamps each entry's first take per
// bus, counts a repeat as a duplicate, answers the stamps of one row's buses only, a
// wait for more entries returns once they are taken, it forgets stamps when asked (a
// forgotten event's take still a duplicate), and it keeps no entry whole.
func TestBusStampsFirstTakesPerBusAndAnswersOneRowsBuses(t *testing.T) {
	stamps := newBusStamps()
	srv := httptest.NewServer(stamps)
	defer srv.Close()
	bus := &remoteBus{url: srv.URL, http: srv.Client()}
	eb := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "test", "")})
	ctx := context.Background()
	put := func(busARN, id string) {
		t.Helper()
		if _, err := eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
			EventBusName: aws.String(busARN), Source: aws.String("com.bench.test"), DetailType: aws.String("job.completed"),
			Detail: aws.String(bareDetail("d0", "job.completed", amqp.Publishing{Headers: amqp.Table{"ce-id": []byte(id)}, Body: []byte(`{"x":1}`)}))}}}); err != nil {
			t.Fatalf("PutEvents to %s: %v", busARN, err)
		}
	}
	sent := time.Now()
	put(relayBusPrefix(1)+"0", "e1")
	put(relayBusPrefix(1)+"0", "e1")  // the same entry again: a duplicate
	put(relayBusPrefix(10)+"0", "e1") // row 10's bus: not row 1's
	if c := bus.counts(); c.N != 2 || c.Dups != 1 {
		t.Fatalf("counts = %+v, want 2 first takes and 1 duplicate", c)
	}
	lat, last, err := bus.latencies([]*event{{id: "e1", sentAt: sent}}, relayBusPrefix(1))
	if err != nil || len(lat) != 1 || lat[0] < 0 || last.Before(sent) {
		t.Fatalf("row 1's latencies = %v (last %v), %v; want one, after the send", lat, last, err)
	}

	// A wait for a third entry: answered when it is taken (had the take come first, at
	// once), at the latest after a second with what there is.
	got := make(chan busCount)
	go func() { got <- bus.countAtLeast(3) }()
	put(fanOutBusPrefix(1)+"0", "e2")
	c := <-got
	if c.N < 3 { // the machine stalled past the second before the take: ask again, after it
		c = bus.countAtLeast(3)
	}
	if c.N != 3 {
		t.Fatalf("waiting for 3 entries answered %+v", c)
	}
	// Forgotten: the stamps go, the counts stay, and a later take of a forgotten event
	// is a duplicate still.
	bus.forget()
	if got := stamps.stamps(stampQuery{IDs: []string{"e1", "e2"}}); len(got["e1"])+len(got["e2"]) != 0 {
		t.Errorf("stamps after forget = %v, want none", got)
	}
	put(relayBusPrefix(1)+"0", "e1")
	put(relayBusPrefix(1)+"1", "e3")
	if c := bus.counts(); c.N != 4 || c.Dups != 2 {
		t.Fatalf("counts after forget and two takes (one of a forgotten event) = %+v, want 4 first takes and 2 duplicates", c)
	}
	// Stamped, answered, counted, and not kept: a whole bench run's entries would hold GBs.
	if kept := stamps.inner.Entries(); len(kept) != 0 {
		t.Errorf("the bench's bus kept %d entries, want none", len(kept))
	}
}

// TestBarePathsWriteTheRelaysBody: what the bare paths put on the bus is the body the
// relay's sink writes for the same event at a destination of the same id, byte for byte.
func TestBarePathsWriteTheRelaysBody(t *testing.T) {
	ev := sizedEvent("bench.x", []byte("k"), 1, 1024)
	id, _ := ev.msg.Headers["ce-id"].([]byte)
	at, _ := ev.msg.Headers["ce-time"].([]byte)
	want := destination.Message{ID: destination.MessageID("d3", string(id)), Type: ev.key, EventID: string(id),
		CreatedAt: string(at), Data: json.RawMessage(ev.msg.Body)}.Body()
	if got := bareDetail("d3", ev.key, ev.msg); got != string(want) || !strings.Contains(got, `"event_id":"`+ev.id+`"`) {
		t.Errorf("bareDetail = %.200s…, want the relay's body %.200s…", got, want)
	}
}
