package config

import (
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/destination"
)

// TestTheWindowAndTheRateCapAreReadFromTheFile: delivery.in_flight sets the default
// window, a destination's in_flight and max_rate its own; a destination that leaves
// them out (or writes 0) has none, and takes the default (Window).
func TestTheWindowAndTheRateCapAreReadFromTheFile(t *testing.T) {
	file := doc(map[string]string{
		"delivery": "delivery: {in_flight: 8}",
		"destinations": `destinations:
  - {id: orders-bus, account: acct_123, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/orders", role_arn: "arn:aws:iam::111122223333:role/mercamap-delivery", in_flight: 1, max_rate: 2.5}
  - {id: orders-topic, account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-events}
  - {id: zero-topic, account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-zero, in_flight: 0, max_rate: 0}`,
	})
	c, err := Parse([]byte(file), env(nil), nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Delivery.InFlight != 8 {
		t.Errorf("delivery.in_flight = %d, want 8", c.Delivery.InFlight)
	}
	for _, want := range []struct {
		window  int
		maxRate float64
	}{{1, 2.5}, {8, 0}, {8, 0}} {
		d := c.Destinations[0]
		c.Destinations = c.Destinations[1:]
		if got := d.Window(c.Delivery.InFlight); got != want.window || d.MaxRate != want.maxRate {
			t.Errorf("%s: window %d, max_rate %v; want %d, %v", d.ID, got, d.MaxRate, want.window, want.maxRate)
		}
	}
}

// TestBadWindowsAndRateCapsAreRefusedAtTheirPath: every out-of-range or unreadable
// value is reported in the one pass, at its path, in a sentence naming the key.
func TestBadWindowsAndRateCapsAreRefusedAtTheirPath(t *testing.T) {
	file := doc(map[string]string{
		"delivery": "delivery: {in_flight: 65}",
		"destinations": `destinations:
  - {id: orders-bus, account: acct_123, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/orders", role_arn: "arn:aws:iam::111122223333:role/mercamap-delivery", in_flight: 100, max_rate: -1}
  - {id: orders-topic, account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-events, in_flight: four, max_rate: 20000}
  - {id: other-topic, account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-other, max_rate: fast}`,
	})
	_, err := Parse([]byte(file), env(nil), nil)
	ps := problemsOf(t, err)
	got := map[string]string{}
	for _, p := range ps {
		got[p.Path] = p.Message
	}
	for path, words := range map[string]string{
		"delivery.in_flight":        "65 is out of range",
		"destinations[0].in_flight": "in_flight 100 is out of range",
		"destinations[0].max_rate":  "max_rate -1 is out of range",
		"destinations[1].in_flight": "must be a whole number",
		"destinations[1].max_rate":  "max_rate 20000 is out of range",
		"destinations[2].max_rate":  "must be a number",
	} {
		if !strings.Contains(got[path], words) {
			t.Errorf("%s: %q; want it to say %q", path, got[path], words)
		}
	}
	if len(ps) != 6 {
		t.Errorf("%d problems, want 6:\n%v", len(ps), ps)
	}
}

// TestAnAPIDestinationsSettingsAreCheckedInTheFilesWords: CheckDestination names the
// body's own fields, with the words the file gets.
func TestAnAPIDestinationsSettingsAreCheckedInTheFilesWords(t *testing.T) {
	c := &Config{Accounts: []Account{{ID: "acct_1"}}, Identity: destination.Identity{GCPServiceAccount: "relay@relay-prod.iam.gserviceaccount.com"}}
	d := destination.Destination{ID: "api-topic", Account: "acct_1", Connector: destination.PubSub, ProjectID: "acme-prod", TopicID: "relay-events",
		InFlight: 65, MaxRate: -3}
	ps := c.CheckDestination(d)
	if len(ps) != 2 || ps[0].Path != "in_flight" || ps[0].Message != destination.InFlightProblem(65) ||
		ps[1].Path != "max_rate" || ps[1].Message != destination.MaxRateProblem(-3) {
		t.Errorf("problems %v; want in_flight's and max_rate's", ps)
	}
}
