package stream

import (
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// Card is a destination as the API shows it: what the config defines, how to set it
// up, and its stored state as of Sequence (its own channel's sequence).
type Card struct {
	ID        string            `json:"id"`
	Connector string            `json:"connector"`
	Account   string            `json:"account"`
	Status    string            `json:"status"`
	Target    map[string]string `json:"target"`
	// ExternalID is the AWS ExternalId; for Pub/Sub, which has none, it is null (the key
	// is always present, so every card has the same shape).
	ExternalID          *string             `json:"external_id"`
	Setup               map[string]any      `json:"setup"`
	ConsecutiveFailures int                 `json:"consecutive_failures"`
	LastFailure         *store.Failure      `json:"last_failure"`
	LastDelivery        *store.Delivery     `json:"last_delivery"`
	Disabled            *store.DisabledInfo `json:"disabled"`
	// Failing: the rejections in a row reached a warning threshold (delivery.warn_after)
	// and how many more disable the destination; null otherwise.
	Failing *store.Failing `json:"failing"`
	// Pending: the destination's setup check has not passed yet; what is missing, in the
	// check's words, and when it runs again. Null once active.
	Pending  *store.PendingCheck `json:"pending"`
	Sequence int64               `json:"sequence"`
	// Lag is how far behind the destination is, on the cards the destination calls
	// answer (GET, list, pause, activate); snapshots and channel events leave it out.
	Lag *Lag `json:"lag,omitempty"`
	// ReplayableFrom is the oldest point a replay may start from (the account log's
	// retention), on the same cards as Lag.
	ReplayableFrom *time.Time `json:"replayable_from,omitempty"`
}

// Lag is a card's measure of how far behind its account's log the destination is.
type Lag struct {
	// Events after the destination's cursor in its account's log (before its event
	// filter), read from positions (exact); EventsAtLeast is kept for clients and is
	// always false since the count stopped being capped.
	Events        int64 `json:"events"`
	EventsAtLeast bool  `json:"events_at_least"`
	// OldestUndeliveredAt is when the oldest of them was stored; null when none waits.
	OldestUndeliveredAt  *time.Time `json:"oldest_undelivered_at"`
	OldestUndeliveredAge float64    `json:"oldest_undelivered_age_seconds"`
}

// NewCard builds the card of d from its stored state.
func NewCard(d destination.Destination, st store.State, id destination.Identity) Card {
	c := Card{
		ID: d.ID, Connector: string(d.Connector), Account: d.Account, Status: st.Status,
		Target: d.Target(), Setup: destination.Setup(d, id, st.ExternalID),
		ConsecutiveFailures: st.ConsecutiveFailures, LastFailure: st.LastFailure,
		LastDelivery: st.LastDelivery, Disabled: st.Disabled, Failing: st.Failing, Pending: st.Pending, Sequence: st.Sequence,
	}
	if d.Connector.IsAWS() {
		ext := st.ExternalID
		c.ExternalID = &ext
	}
	if c.Status == "" {
		c.Status = store.Active
	}
	return c
}

// CardState is the part of a card every channel event carries (lua.go's card_state):
// a follower replaces these fields of its copy of the card with it.
type CardState struct {
	Status              string              `json:"status"`
	ConsecutiveFailures int                 `json:"consecutive_failures"`
	LastFailure         *store.Failure      `json:"last_failure"`
	LastDelivery        *store.Delivery     `json:"last_delivery"`
	Disabled            *store.DisabledInfo `json:"disabled"`
	Failing             *store.Failing      `json:"failing"`
	Pending             *store.PendingCheck `json:"pending"`
}

// Apply replaces the card's state fields with st.
func (c *Card) Apply(st CardState) {
	c.Status, c.ConsecutiveFailures = st.Status, st.ConsecutiveFailures
	c.LastFailure, c.LastDelivery, c.Disabled, c.Failing = st.LastFailure, st.LastDelivery, st.Disabled, st.Failing
	c.Pending = st.Pending
}
