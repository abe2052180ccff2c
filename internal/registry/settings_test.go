package registry

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
)

// record020 is Record as release 0.2.0 has it (git show 235e099^:internal/registry/registry.go):
// what the replicas of the previous release decode this release's records into during a
// roll.
type record020 struct {
	ID         string    `json:"id"`
	Account    string    `json:"account"`
	Connector  string    `json:"connector"`
	BusARN     string    `json:"bus_arn,omitempty"`
	StreamARN  string    `json:"stream_arn,omitempty"`
	RoleARN    string    `json:"role_arn,omitempty"`
	KMSKeyARN  string    `json:"kms_key_arn,omitempty"`
	ProjectID  string    `json:"project_id,omitempty"`
	TopicID    string    `json:"topic_id,omitempty"`
	Events     []string  `json:"events,omitempty"`
	ExternalID string    `json:"external_id,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

// TestA020RecordReadsWithTheDefaultsAndA030OneReadsIn020: during a roll both releases
// share the registry. A record 0.2.0 wrote (no in_flight, no max_rate) reads here with
// neither set: the relay's default window, no cap. A record this release wrote with
// both reads back with both, and decodes, as 0.2.0 decodes it, into what 0.2.0 knows
// of it, with no error. A record without settings is stored byte for byte as 0.2.0
// stores it.
func TestA020RecordReadsWithTheDefaultsAndA030OneReadsIn020(t *testing.T) {
	ctx := context.Background()
	g := client(t)
	created := time.Date(2026, 12, 4, 18, 22, 39, 0, time.UTC)

	old, err := json.Marshal(record020{ID: "old-topic", Account: "acct_1", Connector: "pubsub", ProjectID: "acme-prod",
		TopicID: "relay-events", CreatedAt: created})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.rdb.HSet(ctx, destsKey, "old-topic", old).Err(); err != nil {
		t.Fatal(err)
	}
	rec, err := g.Get(ctx, "old-topic")
	if err != nil {
		t.Fatalf("reading 0.2.0's record: %v", err)
	}
	d := rec.Destination()
	if d.InFlight != 0 || d.MaxRate != 0 || d.Window(destination.DefaultInFlight) != destination.DefaultInFlight {
		t.Errorf("0.2.0's record reads with in_flight %d, max_rate %v; want neither set", d.InFlight, d.MaxRate)
	}
	recs, _, err := g.All(ctx)
	if err != nil || len(recs) != 1 || recs[0].InFlight != 0 {
		t.Errorf("All over 0.2.0's record: %v %+v", err, recs)
	}
	if same, _ := json.Marshal(rec); string(same) != string(old) {
		t.Errorf("a record without settings is stored as\n%s\n0.2.0 stores it as\n%s", same, old)
	}

	set := Record{ID: "new-topic", Account: "acct_1", Connector: "pubsub", ProjectID: "acme-prod", TopicID: "relay-new",
		CreatedAt: created, InFlight: 4, MaxRate: 2.5}
	if _, _, err := g.Create(ctx, set, "", 10); err != nil {
		t.Fatal(err)
	}
	back, err := g.Get(ctx, "new-topic")
	if err != nil || back.InFlight != 4 || back.MaxRate != 2.5 {
		t.Fatalf("this release's record reads back as %+v (%v); want in_flight 4, max_rate 2.5", back, err)
	}
	raw, err := g.rdb.HGet(ctx, destsKey, "new-topic").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(raw, `"in_flight":4`) || !strings.Contains(raw, `"max_rate":2.5`) {
		t.Errorf("stored as %s; want in_flight and max_rate in it", raw)
	}
	var as020 record020
	if err := json.Unmarshal([]byte(raw), &as020); err != nil || as020.ID != "new-topic" || as020.TopicID != "relay-new" ||
		!as020.CreatedAt.Equal(created) {
		t.Errorf("0.2.0 decodes this release's record as %+v (%v)", as020, err)
	}
}
