package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/ratelimit"
	"github.com/mercamap/relay/internal/registry"
	"github.com/mercamap/relay/internal/store"
)

// Destinations made through the API ("Destinations and accounts as data"): create,
// change and delete. What the file defines is read-only here. The registry holds them
// (internal/registry); its change stream carries each one to every replica.

// destinationBody is a create's body, and what a PATCH may hold (pointers: present or
// not).
type destinationBody struct {
	ID        *string   `json:"id"`
	Account   *string   `json:"account"`
	BusARN    *string   `json:"bus_arn"`
	StreamARN *string   `json:"stream_arn"`
	RoleARN   *string   `json:"role_arn"`
	KMSKeyARN *string   `json:"kms_key_arn"`
	ProjectID *string   `json:"project_id"`
	TopicID   *string   `json:"topic_id"`
	Events    *[]string `json:"events"`
	// The delivery settings (settings.go): absent, null or a value.
	InFlight nullable `json:"in_flight"`
	MaxRate  nullable `json:"max_rate"`
}

func val(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// maxIdempotencyKey bounds an Idempotency-Key header (it names a Redis key).
const maxIdempotencyKey = 200

// decodeStrict reads the body, a JSON object of what's fields, into v; an unknown
// field is refused, so a typo is an error, not a silent default.
func decodeStrict(r *http.Request, v any, what string) *apiError {
	raw, e := readBody(r)
	if e != nil {
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errInvalid("the body must be a JSON object of " + what + ": " + err.Error())
	}
	return nil
}

// destinationFields names a destination body's fields, for decodeStrict.
const destinationFields = "the destination's fields (id, account, bus_arn, stream_arn, role_arn, kms_key_arn, project_id, topic_id, events, in_flight, max_rate)"

// fieldsOf turns config problems into a body's field problems.
func fieldsOf(ps config.Problems) []fieldProblem {
	out := make([]fieldProblem, len(ps))
	for i, p := range ps {
		out[i] = fieldProblem{Field: p.Path, Message: p.Message}
	}
	return out
}

// spendChange takes one create, change or delete from acct's budget (every replica's
// together); false when it answered 429 or 503. The caller settles the grant: a change
// refused after it (an id taken, a destination deleted meanwhile) gives it back.
func (s *Server) spendChange(w http.ResponseWriter, r *http.Request, acct string) (grant, bool) {
	return s.spend(w, r, acct, ratelimit.Limit{Key: "destination_changes:account",
		What: "destination creates, changes and deletes for an account", Rate: s.limits.Load().DestinationChangesPerAccount})
}

// newDestinationID is the id the relay makes when a create names none.
func newDestinationID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "dst_" + hex.EncodeToString(b)
}

func (s *Server) createDestination(w http.ResponseWriter, r *http.Request, p principal) {
	conn := destination.Connector(r.PathValue("connector"))
	if !conn.Known() {
		writeError(w, errNotFound("no connector "+strconv.Quote(string(conn))+": use eventbridge, kinesis or pubsub"))
		return
	}
	if s.opts.Registry == nil {
		writeError(w, errConflict("this relay takes its destinations from its config file only"))
		return
	}
	var b destinationBody
	if e := decodeStrict(r, &b, destinationFields); e != nil {
		writeError(w, e)
		return
	}
	idem := r.Header.Get("Idempotency-Key")
	if len(idem) > maxIdempotencyKey {
		writeError(w, errInvalid("the Idempotency-Key header is longer than "+strconv.Itoa(maxIdempotencyKey)+" characters"))
		return
	}
	acct := val(b.Account)
	if !p.admin {
		if b.Account != nil && acct != p.account {
			writeError(w, errForbidden("an account token adds destinations to its own account only: leave account out, or name "+p.account))
			return
		}
		acct = p.account
	}
	d := destination.Destination{ID: val(b.ID), Account: acct, Connector: conn, BusARN: val(b.BusARN),
		StreamARN: val(b.StreamARN), RoleARN: val(b.RoleARN), KMSKeyARN: val(b.KMSKeyARN),
		ProjectID: val(b.ProjectID), TopicID: val(b.TopicID), ManagedBy: destination.ManagedByAPI}
	if b.Events != nil {
		d.Events = *b.Events
	}
	if d.ID == "" {
		d.ID = newDestinationID()
	}
	unread := settingsOf(b.InFlight, b.MaxRate, &d)
	cfg := s.cfg.Load()
	if ps := append(fieldsOf(cfg.CheckDestination(d)), unread...); len(ps) > 0 {
		writeError(w, errFields("the destination has problems; nothing was made", ps))
		return
	}
	taken := errExists("destination id " + strconv.Quote(d.ID) + " is taken: choose another, or leave id out and the relay makes one")
	fileCount := 0
	for _, fd := range cfg.Destinations {
		if fd.ID == d.ID {
			writeError(w, taken)
			return
		}
		if fd.Account == acct {
			fileCount++
		}
	}
	g, ok := s.spendChange(w, r, acct)
	if !ok {
		return
	}
	rec := registry.Record{ID: d.ID, Account: acct, Connector: string(conn), BusARN: d.BusARN, StreamARN: d.StreamARN,
		RoleARN: d.RoleARN, KMSKeyARN: d.KMSKeyARN, ProjectID: d.ProjectID, TopicID: d.TopicID, Events: d.Events,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if conn.IsAWS() {
		rec.ExternalID = destination.NewExternalID() // never derived: a deleted id made again gets a new one
	}
	rec.InFlight, rec.MaxRate = d.InFlight, d.MaxRate
	most := s.limits.Load().DestinationsPerAccount - fileCount
	// From the registry's record to the Upsert below, this replica's follower leaves
	// the id to this create (it must not start a worker on state Forget then deletes).
	defer s.opts.Destinations.Making(d.ID)()
	id, made, err := s.opts.Registry.Create(r.Context(), rec, idem, most)
	if s.settle(r.Context(), g, err); err == nil && !made {
		s.refund(r.Context(), g) // a retried create makes nothing: its first spent already
	}
	switch {
	case errors.Is(err, registry.ErrExists):
		writeError(w, taken)
		return
	case errors.Is(err, registry.ErrCapped):
		writeError(w, errExhausted("the account has "+strconv.Itoa(s.limits.Load().DestinationsPerAccount)+" destinations, as many as it may (api.destinations_per_account): delete one first", 0))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	if !made { // a retried create: the destination its key made, on whichever replica
		if rec, err = s.opts.Registry.Get(r.Context(), id); errors.Is(err, destination.ErrNotFound) {
			writeError(w, errConflict("this Idempotency-Key made destination "+strconv.Quote(id)+", deleted since: use a new key"))
			return
		} else if err != nil {
			s.fail(w, r, err)
			return
		}
		if rec.Account != acct {
			writeError(w, errConflict("this Idempotency-Key was used for another create: use a new key"))
			return
		}
	} else if err := s.opts.Store.Forget(r.Context(), store.Ref{Account: acct, ID: id}); err != nil {
		// What an earlier destination of the same id left (a replica's late copy) goes,
		// so this one's state, and its ExternalId, start afresh.
		s.fail(w, r, err)
		return
	}
	nd := rec.Destination()
	if err := s.opts.Destinations.Upsert(r.Context(), nd); err != nil {
		s.fail(w, r, err)
		return
	}
	if made {
		s.log.Info("destination created through the api", "destination", id, "account", acct, "connector", string(conn), "admin", p.admin)
	}
	s.writeCardStatus(w, r, nd, http.StatusCreated)
}

// managedHere answers 409 for a destination the file defines; true when the API may
// change it.
func (s *Server) managedHere(w http.ResponseWriter, d destination.Destination) bool {
	if d.Managed() == destination.ManagedByAPI && s.opts.Registry != nil {
		return true
	}
	writeError(w, errConflict("destination "+strconv.Quote(d.ID)+" is defined in "+s.fileWhere()+": it is changed or removed there, by the platform's operators"))
	return false
}

// fileWhere names the config file in an answer.
func (s *Server) fileWhere() string {
	if s.opts.ConfigPath != "" {
		return "the relay's config file (" + s.opts.ConfigPath + ")"
	}
	return "the relay's config file"
}

func (s *Server) patchDestination(w http.ResponseWriter, r *http.Request, p principal) {
	d, ok := s.lookup(w, r, p)
	if !ok || !s.managedHere(w, d) {
		return
	}
	var b destinationBody
	if e := decodeStrict(r, &b, destinationFields); e != nil {
		writeError(w, e)
		return
	}
	var fixed []fieldProblem
	for _, f := range []struct {
		name string
		v    *string
	}{{"id", b.ID}, {"account", b.Account}, {"bus_arn", b.BusARN}, {"stream_arn", b.StreamARN},
		{"project_id", b.ProjectID}, {"topic_id", b.TopicID}} {
		if f.v != nil {
			fixed = append(fixed, fieldProblem{f.name, f.name + " never changes: a new target is a new destination (create it, then delete this one)"})
		}
	}
	if len(fixed) > 0 {
		writeError(w, errFields("only role_arn, kms_key_arn, events, in_flight and max_rate change; nothing was changed", fixed))
		return
	}
	nd := d
	if b.RoleARN != nil {
		nd.RoleARN = *b.RoleARN
	}
	if b.KMSKeyARN != nil {
		nd.KMSKeyARN = *b.KMSKeyARN
	}
	if b.Events != nil {
		nd.Events = *b.Events
	}
	unread := settingsOf(b.InFlight, b.MaxRate, &nd)
	if ps := append(fieldsOf(s.cfg.Load().CheckDestination(nd)), unread...); len(ps) > 0 {
		writeError(w, errFields("the change has problems; nothing was changed", ps))
		return
	}
	g, ok := s.spendChange(w, r, d.Account)
	if !ok {
		return
	}
	rec, err := s.opts.Registry.Get(r.Context(), d.ID)
	if err == nil {
		rec.RoleARN, rec.KMSKeyARN, rec.Events = nd.RoleARN, nd.KMSKeyARN, nd.Events
		rec.InFlight, rec.MaxRate = nd.InFlight, nd.MaxRate
		err = s.opts.Registry.Update(r.Context(), rec)
	}
	if s.settle(r.Context(), g, err); err != nil { // deleted meanwhile: 404, nothing changed
		s.fail(w, r, err)
		return
	}
	nd = rec.Destination()
	if err := s.opts.Destinations.Upsert(r.Context(), nd); err != nil {
		s.fail(w, r, err)
		return
	}
	if nd.RoleARN != d.RoleARN || nd.KMSKeyARN != d.KMSKeyARN {
		// A new role is checked before anything is written through it; the ExternalId stays.
		check := store.PendingCheck{At: time.Now().UTC(), Message: "the destination's role changed: the relay checks the new one before it delivers"}
		if _, err := s.opts.Store.Repend(r.Context(), store.Ref{Account: d.Account, ID: d.ID}, check, s.channelRetention()); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	s.log.Info("destination changed through the api", "destination", d.ID, "account", d.Account, "admin", p.admin)
	s.writeCardStatus(w, r, nd, http.StatusOK)
}

func (s *Server) deleteDestination(w http.ResponseWriter, r *http.Request, p principal) {
	d, ok := s.lookup(w, r, p)
	if !ok || !s.managedHere(w, d) {
		return
	}
	g, ok := s.spendChange(w, r, d.Account)
	if !ok {
		return
	}
	ch, err := s.opts.Destinations.Delete(r.Context(), d.ID, func(ctx context.Context) error {
		err := s.opts.Registry.Delete(ctx, d.ID)
		if errors.Is(err, destination.ErrNotFound) {
			return nil // deleted meanwhile, through another replica
		}
		return err
	})
	s.settle(r.Context(), g, err)
	if errors.Is(err, destination.ErrNotFound) {
		writeError(w, errNotFound("no destination "+strconv.Quote(d.ID)+" under "+string(d.Connector)))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("destination deleted through the api", "destination", d.ID, "account", d.Account, "admin", p.admin,
		"write_in_flight", ch.WriteInFlight)
	writeJSON(w, http.StatusOK, map[string]any{"deleted": d.ID, "write_in_flight": ch.WriteInFlight})
}

// writeCardStatus answers with d's card, as GET does, with status.
func (s *Server) writeCardStatus(w http.ResponseWriter, r *http.Request, d destination.Destination, status int) {
	card, err := s.cardWithLag(r.Context(), d)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, status, card)
}
