package stream

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// Card is a destination as the API shows it: what the config defines, how to set it
// up, and its stored state as of Sequence (its own channel's sequence). A card's maps
// (Target, Setup) and what its pointers point at are shared with the other copies of
// the same view (view.go): change a field of a copy, never what a map or a pointer holds.
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
	// ManagedBy is where the destination is defined ("config": the file, read-only
	// through the API; "api"); CreatedAt when it was made (the API's record, else when
	// Redis first held it; null for one stored before that was kept).
	ManagedBy string     `json:"managed_by"`
	CreatedAt *time.Time `json:"created_at"`
	// Events are the short types the destination delivers (its filter); empty: all.
	Events []string `json:"events"`
	// InFlight is the destination's window as it applies: its own in_flight, else the
	// deployment's delivery.in_flight. MaxRate is its cap on writes per second; null
	// when it has none.
	InFlight int      `json:"in_flight"`
	MaxRate  *float64 `json:"max_rate"`
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

// NewCard builds the card of d from its stored state; window is the deployment's
// delivery.in_flight, the window of a destination that sets none.
func NewCard(d destination.Destination, st store.State, id destination.Identity, window int) Card {
	c := staticCard(d, st, id, window)
	c.setStored(st)
	return c
}

// staticCard is the part of d's card that changes only with its definition, our
// identity or its stored ExternalId and creation time (staticKey): the config's target,
// the setup to make, its delivery settings, and where and when it was made. Its maps are
// built here and only read after, so cards built from it may share them.
func staticCard(d destination.Destination, st store.State, id destination.Identity, window int) Card {
	c := Card{ID: d.ID, Connector: string(d.Connector), Account: d.Account,
		Target: d.Target(), Setup: destination.Setup(d, id, st.ExternalID), ManagedBy: d.Managed(),
		Events: append([]string{}, d.Events...), InFlight: d.Window(window)}
	if d.MaxRate > 0 {
		r := d.MaxRate
		c.MaxRate = &r
	}
	if d.Connector.IsAWS() {
		ext := st.ExternalID
		c.ExternalID = &ext
	}
	switch {
	case !d.CreatedAt.IsZero():
		t := d.CreatedAt.UTC()
		c.CreatedAt = &t
	case !st.CreatedAt.IsZero():
		t := st.CreatedAt
		c.CreatedAt = &t
	}
	return c
}

// setStored sets the card's state fields and sequence from the stored state.
func (c *Card) setStored(st store.State) {
	c.Status, c.ConsecutiveFailures, c.LastFailure = st.Status, st.ConsecutiveFailures, st.LastFailure
	c.LastDelivery, c.Disabled, c.Failing, c.Pending, c.Sequence = st.LastDelivery, st.Disabled, st.Failing, st.Pending, st.Sequence
	if c.Status == "" {
		c.Status = store.Active
	}
}

// CardState is the part of a card a channel event's state changes (lua.go's card_state
// and channel.go's outcomeData): an event names all of its fields, or only those it changed, and a
// follower sets the fields it names (ApplyChanges).
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

// State is the card's state fields.
func (c *Card) State() CardState {
	return CardState{Status: c.Status, ConsecutiveFailures: c.ConsecutiveFailures, LastFailure: c.LastFailure,
		LastDelivery: c.LastDelivery, Disabled: c.Disabled, Failing: c.Failing, Pending: c.Pending}
}

// ApplyChanges sets the card's state fields an event's state object names (JSON: a
// field's name, its new value; null clears it) and keeps the others; names it does not
// know are left alone. An object that is not a state changes nothing and says so.
func (c *Card) ApplyChanges(changes map[string]json.RawMessage) error {
	b, err := json.Marshal(c.State())
	if err != nil {
		return err
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	for k, v := range changes {
		if _, ok := fields[k]; ok {
			fields[k] = v
		}
	}
	if b, err = json.Marshal(fields); err != nil {
		return err
	}
	var st CardState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("channel event's state: %w", err)
	}
	c.Apply(st)
	return nil
}
