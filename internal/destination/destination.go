// Package destination owns the destination model: what one customer bus is (an
// EventBridge bus, a Kinesis stream or a Pub/Sub topic), the ARN, partition, region and
// account checks that refuse a bad target, and the card's setup (policies, commands).
// It calls no cloud and stores nothing: it only describes and checks.
package destination

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"
)

// ErrNotFound is the one "not found" of every lookup of a destination, whoever holds
// it: the config (dispatch), its stored state (store), its channel or card (stream) and
// the API's records (registry, its accounts too). An error is one when errors.Is finds it.
var ErrNotFound = errors.New("no such destination")

// Connector names the kind of bus a destination writes to.
type Connector string

// The three connectors; a destination is listed only under its own.
const (
	EventBridge Connector = "eventbridge"
	Kinesis     Connector = "kinesis"
	PubSub      Connector = "pubsub"
)

// Connectors lists every known connector, in the order they are shown.
func Connectors() []Connector { return []Connector{EventBridge, Kinesis, PubSub} }

// Known reports whether c is one of the three connectors.
func (c Connector) Known() bool { return c == EventBridge || c == Kinesis || c == PubSub }

// IsAWS reports whether the connector writes through an assumed AWS role.
func (c Connector) IsAWS() bool { return c == EventBridge || c == Kinesis }

// Destination is one customer bus of one account, as the config defines it.
type Destination struct {
	ID, Account string
	Connector   Connector

	// AWS (eventbridge: BusARN, RoleARN; kinesis: StreamARN, RoleARN, KMSKeyARN optional).
	BusARN, StreamARN, RoleARN, KMSKeyARN string
	// Pub/Sub.
	ProjectID, TopicID string

	// Events lists the short types (routing keys) to deliver; empty means all.
	Events []string

	// PinnedExternalID is the config's external_id (AWS only), "" when not pinned.
	// DerivedExternalID is derived from identity.external_id_secret for an AWS
	// destination that pins none, "" without the secret. Either one is what the relay
	// stores at first sight instead of a random id (ConfiguredExternalID).
	PinnedExternalID, DerivedExternalID string

	// ExternalID is the one Redis holds (issued at first sight, never changed after);
	// dispatch fills it in before each write. The config never sets it.
	ExternalID string

	// ManagedBy says where the destination is defined: ManagedByConfig (the file) or
	// ManagedByAPI (the registry, internal/registry); CreatedAt is when the API made it
	// (zero for the file's). Neither is part of the Fingerprint.
	ManagedBy string
	CreatedAt time.Time

	// InFlight is the destination's window: how many of its writes may be in flight at
	// once, each of another ordering key (events of one key go one at a time, in arrival
	// order). 0: the deployment's delivery.in_flight (Window). MaxRate caps its writes
	// per second, e.g. to leave room in an AWS account's EventBridge PutEvents quota,
	// which every bus of that account shares; 0: no cap. Both are in the Fingerprint
	// (which see), so a change of either restarts the destination's worker with it.
	InFlight int
	MaxRate  float64
}

// Bounds of a destination's settings (Validate checks them; config and the API use them).
const (
	DefaultInFlight = 16    // delivery.in_flight when the config leaves it out
	MaxInFlight     = 64    // the largest window, the deployment's or a destination's
	MaxRateLimit    = 10000 // the largest max_rate, writes per second
)

// Window is how many writes d may have in flight: its own InFlight when set, else def
// (the deployment's delivery.in_flight).
func (d Destination) Window(def int) int {
	if d.InFlight > 0 {
		return d.InFlight
	}
	return def
}

// Where a destination is defined (Destination.ManagedBy); "" reads as the file.
const (
	ManagedByConfig = "config"
	ManagedByAPI    = "api"
)

// Managed is d.ManagedBy, ManagedByConfig when unset.
func (d Destination) Managed() string {
	if d.ManagedBy == "" {
		return ManagedByConfig
	}
	return d.ManagedBy
}

// Wants reports whether an event of the given short type goes to d.
func (d Destination) Wants(shortType string) bool {
	return len(d.Events) == 0 || slices.Contains(d.Events, shortType)
}

// Fingerprint is a stable hash of everything that defines d: connector, account, target
// fields, the event filter (as a set) and its delivery settings (InFlight, MaxRate). It
// changes when the config or the API redefines the destination, so stored state can tell
// a redefinition from a restart. The id is the key it is stored under, so it is not part
// of the hash.
//
// The settings are in it because a changed fingerprint is how a change reaches the
// running worker: dispatch stops the worker of a redefined destination and the next
// lease round starts it on the new definition; the API's follower on each replica takes
// a record whose fingerprint differs; a card's static part is rebuilt. Nothing else
// follows from it: the stored state gets the new fingerprint and its channels a
// resync.required (so watchers load the card with the new settings), while the status,
// cursor and ExternalId stay, and nothing goes back to pending (only a new role does,
// which the API does itself). Unset settings are left out of the hashed bytes
// (omitempty), so a destination that sets neither keeps the fingerprint 0.2.0 computed:
// an upgrade redefines nothing, and a roll's two releases agree on every such
// destination.
func (d Destination) Fingerprint() string {
	// The filter as a set: sorted, each once. Most are already (the API and the config
	// keep them as given, usually so), and then hashed as they are, not copied.
	events := d.Events
	if len(events) == 0 {
		events = []string{}
	} else if !isSet(events) {
		events = slices.Compact(slices.Sorted(slices.Values(events)))
	}
	// A struct with a fixed field order marshals to the same bytes every time. It is
	// encoded into a pooled buffer (Marshal's bytes, and a newline after them) rather
	// than into a copy of its own: a start hashes every destination.
	e := fingerprintEncoders.Get().(*fingerprintEncoder)
	defer func() {
		if e.buf.Cap() <= 64<<10 { // an outsized one is not kept
			fingerprintEncoders.Put(e)
		}
	}()
	e.buf.Reset()
	err := e.enc.Encode(struct {
		V         int       `json:"v"`
		Connector Connector `json:"connector"`
		Account   string    `json:"account"`
		BusARN    string    `json:"bus_arn"`
		StreamARN string    `json:"stream_arn"`
		RoleARN   string    `json:"role_arn"`
		KMSKeyARN string    `json:"kms_key_arn"`
		ProjectID string    `json:"project_id"`
		TopicID   string    `json:"topic_id"`
		Events    []string  `json:"events"`
		InFlight  int       `json:"in_flight,omitempty"`
		MaxRate   string    `json:"max_rate,omitempty"` // text: a NaN that skipped Validate must not panic
	}{1, d.Connector, d.Account, d.BusARN, d.StreamARN, d.RoleARN, d.KMSKeyARN, d.ProjectID, d.TopicID, events,
		d.InFlight, rateText(d.MaxRate)})
	if err != nil {
		panic("destination: fingerprint: " + err.Error()) // strings only: cannot fail
	}
	sum := sha256.Sum256(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")))
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], sum[:])
	return string(text[:])
}

// fingerprintEncoder is a JSON encoder (Marshal's escaping: HTML too) writing into its
// own buffer; Fingerprint takes one from fingerprintEncoders.
type fingerprintEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var fingerprintEncoders = sync.Pool{New: func() any {
	e := &fingerprintEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	return e
}}

// isSet reports whether s is sorted with no string twice: what Fingerprint makes of an
// event filter already.
func isSet(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] >= s[i] {
			return false
		}
	}
	return true
}

// rateText is r as the Fingerprint hashes it: "" when off, else its shortest exact text.
func rateText(r float64) string {
	if r == 0 {
		return ""
	}
	return strconv.FormatFloat(r, 'g', -1, 64)
}

// CloudScope names the cloud boundary d writes into: "aws:<role's account id>" or
// "gcp:<project id>". An operator disabling one destination disables, with it, the
// account's other destinations of the same scope. It is "" when the target does not say.
func (d Destination) CloudScope() string {
	switch {
	case d.Connector.IsAWS():
		a, err := ParseARN(d.RoleARN)
		if err != nil || a.AccountID == "" {
			return ""
		}
		return "aws:" + a.AccountID
	case d.Connector == PubSub && d.ProjectID != "":
		return "gcp:" + d.ProjectID
	}
	return ""
}

// Target is the card's "target": the fields that name where d writes.
func (d Destination) Target() map[string]string {
	switch d.Connector {
	case EventBridge:
		return map[string]string{"bus_arn": d.BusARN, "role_arn": d.RoleARN}
	case Kinesis:
		t := map[string]string{"stream_arn": d.StreamARN, "role_arn": d.RoleARN}
		if d.KMSKeyARN != "" {
			t["kms_key_arn"] = d.KMSKeyARN
		}
		return t
	case PubSub:
		return map[string]string{"project_id": d.ProjectID, "topic_id": d.TopicID}
	}
	return map[string]string{}
}

// TopicName is the Pub/Sub topic's full name, projects/P/topics/T.
func (d Destination) TopicName() string {
	return "projects/" + d.ProjectID + "/topics/" + d.TopicID
}
