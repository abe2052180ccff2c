// Package destination owns the destination model: what one customer bus is (an
// EventBridge bus, a Kinesis stream or a Pub/Sub topic), the ARN, partition, region and
// account checks that refuse a bad target, and the card's setup (policies, commands).
// It calls no cloud and stores nothing: it only describes and checks.
package destination

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
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
// fields and the event filter (as a set). It changes when the config redefines the
// destination, so stored state can tell a redefinition from a restart. The id is the
// key it is stored under, so it is not part of the hash.
func (d Destination) Fingerprint() string {
	events := slices.Clone(d.Events)
	slices.Sort(events)
	events = slices.Compact(events)
	if events == nil {
		events = []string{}
	}
	// A struct with a fixed field order marshals to the same bytes every time.
	b, err := json.Marshal(struct {
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
	}{1, d.Connector, d.Account, d.BusARN, d.StreamARN, d.RoleARN, d.KMSKeyARN, d.ProjectID, d.TopicID, events})
	if err != nil {
		panic("destination: fingerprint: " + err.Error()) // strings only: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
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
