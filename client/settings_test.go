package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mercamap/relay/client"
)

// TestAWindowAndARateCapAreSetChangedAndClearedThroughTheAPI: a create may set in_flight
// and max_rate, and its card shows them; a destination that sets none shows the relay's
// default window (16) and no cap; a change sets the window, another clears both with
// null (the relay's default, no cap) and leaves the rest; a value out of range, or a 0,
// is refused with each field named and its sentence saying which, and changes nothing.
// Every request and answer is checked against the API's document.
func TestAWindowAndARateCapAreSetChangedAndClearedThroughTheAPI(t *testing.T) {
	r := startRelay(t, "", "")
	ctx := context.Background()
	acct := client.New(r.url, acctToken, client.Options{})

	plain, err := acct.Destination(ctx, client.Ref{Connector: client.Eventbridge, ID: "orders-bus"})
	if err != nil || plain.InFlight != 16 || plain.MaxRate != nil {
		t.Fatalf("the file's orders-bus: in_flight %d, max_rate %v (%v); want 16, null", plain.InFlight, plain.MaxRate, err)
	}
	id := "api-window"
	card, err := acct.CreateDestination(ctx, client.Eventbridge, client.DestinationCreate{ID: &id,
		BusArn: ptr("arn:aws:events:us-east-1:111122223333:event-bus/api-window"), RoleArn: ptr(busRole),
		InFlight: ptr(4), MaxRate: ptr(2.5)}, "")
	if err != nil || card.InFlight != 4 || card.MaxRate == nil || *card.MaxRate != 2.5 {
		t.Fatalf("a create with in_flight 4, max_rate 2.5: %+v (%v)", card, err)
	}
	ref := client.RefOf(card)
	if card, err = acct.ChangeDestination(ctx, ref, client.DestinationChange{InFlight: ptr(1)}); err != nil ||
		card.InFlight != 1 || card.MaxRate == nil || *card.MaxRate != 2.5 || card.ExternalID == nil {
		t.Fatalf("in_flight changed to 1: %+v (%v); want 1, the cap kept", card, err)
	}
	if card, err = acct.Destination(ctx, ref); err != nil || card.InFlight != 1 {
		t.Fatalf("read again: in_flight %d (%v), want 1", card.InFlight, err)
	}
	ext := *card.ExternalID
	if card, err = acct.ChangeDestination(ctx, ref, client.DestinationChange{}, client.FieldInFlight, client.FieldMaxRate); err != nil ||
		card.InFlight != 16 || card.MaxRate != nil || *card.ExternalID != ext || card.Status != client.StatusPending {
		t.Fatalf("both set to null: %+v (%v); want the default window, no cap, the same ExternalId and status", card, err)
	}

	for _, bad := range []struct {
		body  client.DestinationChange
		field string
	}{
		{client.DestinationChange{InFlight: ptr(0)}, "in_flight"},
		{client.DestinationChange{InFlight: ptr(65)}, "in_flight"},
		{client.DestinationChange{MaxRate: ptr(0.0)}, "max_rate"},
		{client.DestinationChange{MaxRate: ptr(20000.0)}, "max_rate"},
	} {
		_, err := acct.ChangeDestination(ctx, ref, bad.body)
		var e *client.Error
		if !errors.As(err, &e) || e.Code != client.CodeInvalidArgument || len(e.Fields) != 1 ||
			e.Fields[0].Field != bad.field || !strings.HasPrefix(e.Fields[0].Message, bad.field+" ") {
			t.Errorf("%+v: %v; want 400 naming %s", bad.body, err, bad.field)
		}
	}
	_, err = acct.CreateDestination(ctx, client.Eventbridge, client.DestinationCreate{BusArn: ptr("nope"), RoleArn: ptr(busRole),
		InFlight: ptr(100), MaxRate: ptr(-1.0)}, "")
	var e *client.Error
	fields := map[string]bool{}
	if errors.As(err, &e) {
		for _, f := range e.Fields {
			fields[f.Field] = true
		}
	}
	if !fields["bus_arn"] || !fields["in_flight"] || !fields["max_rate"] {
		t.Errorf("a create with three problems: %v; want bus_arn, in_flight and max_rate each named", err)
	}
	if card, err = acct.Destination(ctx, ref); err != nil || card.InFlight != 16 || card.MaxRate != nil {
		t.Errorf("after the refused changes: in_flight %d, max_rate %v (%v); want them unchanged", card.InFlight, card.MaxRate, err)
	}
}
