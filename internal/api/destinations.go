package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/stream"
)

// Attempt page limits.
const (
	defaultAttemptsLimit = 50
	maxAttemptsLimit     = 500
)

type connectorCount struct {
	Connector    string `json:"connector"`
	Destinations int    `json:"destinations"`
}

func (s *Server) listConnectors(w http.ResponseWriter, r *http.Request, p principal) {
	counts := map[destination.Connector]int{}
	for _, d := range s.visible(p) {
		counts[d.Connector]++
	}
	out := []connectorCount{}
	for _, c := range destination.Connectors() {
		out = append(out, connectorCount{Connector: string(c), Destinations: counts[c]})
	}
	writeJSON(w, http.StatusOK, map[string]any{"connectors": out})
}

// lookup finds the destination of a /v1/connectors/{connector}/destinations/{id} path.
// Another account's destination answers exactly like a missing one, so an account token
// cannot learn which ids exist; so does one that lives under another connector.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, p principal) (destination.Destination, bool) {
	conn := destination.Connector(r.PathValue("connector"))
	if !conn.Known() {
		writeError(w, errNotFound("no connector "+strconv.Quote(string(conn))+": use eventbridge, kinesis or pubsub"))
		return destination.Destination{}, false
	}
	id := r.PathValue("id")
	d, ok := s.opts.Destinations.Destination(id)
	if !ok || d.Connector != conn || !p.sees(d.Account) {
		writeError(w, errNotFound("no destination "+strconv.Quote(id)+" under "+string(conn)))
		return destination.Destination{}, false
	}
	return d, true
}

func (s *Server) getDestination(w http.ResponseWriter, r *http.Request, p principal) {
	if d, ok := s.lookup(w, r, p); ok {
		s.writeCard(w, r, d)
	}
}

func (s *Server) writeCard(w http.ResponseWriter, r *http.Request, d destination.Destination) {
	s.writeCardStatus(w, r, d, http.StatusOK)
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request, p principal) {
	s.changeStatus(w, r, p, "paused", plainAction, s.opts.Destinations.Pause)
}

// activate takes an empty body (deliver what arrives from now on), or
// {"replay":"since_disabled"} / {"replay":"since_paused"}: resume from where delivery
// stopped, with what arrived meanwhile first, in order.
func (s *Server) activate(w http.ResponseWriter, r *http.Request, p principal) {
	var body struct {
		Replay string `json:"replay"`
	}
	if b, e := readBody(r); e != nil {
		writeError(w, e)
		return
	} else if len(b) > 0 && json.Unmarshal(b, &body) != nil {
		writeError(w, errInvalid(`the body must be JSON like {"replay":"since_disabled"} or empty`))
		return
	}
	if body.Replay != "" && body.Replay != store.SinceDisabled && body.Replay != store.SincePaused {
		writeError(w, errInvalid(`replay must be "since_disabled" or "since_paused"`))
		return
	}
	kind := plainAction
	if body.Replay != "" {
		kind = replayAction
	}
	s.changeStatus(w, r, p, "activated", kind, func(ctx context.Context, id string, operator bool) (dispatch.Change, error) {
		return s.opts.Destinations.ActivateSince(ctx, id, operator, body.Replay)
	})
}

// replay takes {"from":"<RFC 3339>"} or {"after_event":"<ce-id>"} and answers with the
// card after it, the cursor delivery restarts after and whether it waits for an
// activation.
func (s *Server) replay(w http.ResponseWriter, r *http.Request, p principal) {
	d, ok := s.lookup(w, r, p)
	if !ok {
		return
	}
	var body struct {
		From       string `json:"from"`
		AfterEvent string `json:"after_event"`
		DryRun     bool   `json:"dry_run"` // count what it would send, send nothing (recovery.go)
	}
	b, e := readBody(r)
	if e != nil {
		writeError(w, e)
		return
	}
	if json.Unmarshal(b, &body) != nil || (body.From == "") == (body.AfterEvent == "") {
		writeError(w, errInvalid(`the body must be JSON like {"from":"2024-05-01T12:00:00Z"} or {"after_event":"<ce-id>"}: one of the two`))
		return
	}
	point := store.ReplayPoint{AfterEvent: body.AfterEvent}
	if body.From != "" {
		t, err := time.Parse(time.RFC3339Nano, body.From)
		if err != nil {
			writeError(w, errInvalid("from must be an RFC 3339 time, like 2024-05-01T12:00:00Z"))
			return
		}
		point.From = t
	}
	if body.DryRun {
		s.replayDryRun(w, r, d, point, body.AfterEvent)
		return
	}
	// A point the log no longer keeps is known here, before any limit is spent; one
	// only Redis can tell (an after_event it does not hold) gives its tokens back.
	if oldest := s.opts.Destinations.ReplayableFrom(); body.From != "" && point.From.Before(oldest) {
		writeError(w, errTooOld(oldest))
		return
	}
	g, ok := s.allow(w, r, p, d, replayAction)
	if !ok {
		return
	}
	res, err := s.opts.Destinations.Replay(r.Context(), d.ID, point)
	s.settle(r.Context(), g, err)
	var tooOld store.ErrTooOld
	switch {
	case errors.As(err, &tooOld):
		writeError(w, errTooOld(tooOld.Oldest))
		return
	case errors.Is(err, store.ErrNoSuchEvent):
		writeError(w, errInvalid("the account's log holds no event "+strconv.Quote(body.AfterEvent)+
			" (never received, or older than the log keeps: replay from a time instead)"))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	s.log.Info("destination replay through the api", "destination", d.ID, "admin", p.admin, "cursor", res.Cursor, "pending", res.Pending)
	card, err := s.cardWithLag(r.Context(), d)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, replayedCard{Card: card, Replay: replayAnswer{Cursor: res.Cursor, Pending: res.Pending}})
}

// errTooOld is the 400 for a replay point older than oldest, the log's oldest point.
func errTooOld(oldest time.Time) *apiError {
	return errInvalid("the replay point is older than the log keeps; the oldest point still replayable (the card's replayable_from) is " +
		oldest.UTC().Format(time.RFC3339))
}

// replayedCard is the answer to a replay: the card after it, and the replay.
type replayedCard struct {
	stream.Card
	Replay replayAnswer `json:"replay"`
}

type replayAnswer struct {
	Cursor  string `json:"cursor"`  // the log id delivery restarts after
	Pending bool   `json:"pending"` // not active: it starts when the destination is activated
}

// changedCard is the answer to a pause or an activation: the card after the change
// (its lag and replayable_from included), and whether a write begun before it was still in flight (it may still land; none
// starts after the answer, on any replica).
type changedCard struct {
	stream.Card
	WriteInFlight bool `json:"write_in_flight"`
}

// changeStatus applies a pause or an activation and answers with the card after it.
// An account token gets 403 FORBIDDEN, with the reason, for a destination our
// operators disabled.
func (s *Server) changeStatus(w http.ResponseWriter, r *http.Request, p principal, done string, kind action,
	change func(context.Context, string, bool) (dispatch.Change, error)) {
	d, ok := s.lookup(w, r, p)
	if !ok {
		return
	}
	g, ok := s.allow(w, r, p, d, kind)
	if !ok {
		return
	}
	res, err := change(r.Context(), d.ID, p.admin)
	s.settle(r.Context(), g, err)
	if errors.Is(err, dispatch.ErrOperatorDisabled) {
		s.forbidOperatorDisabled(w, r, d)
		return
	}
	var mismatch store.ErrSinceMismatch
	if errors.As(err, &mismatch) {
		if mismatch.Status == store.Active {
			writeError(w, errInvalid(`the destination is active: nothing to resume; activate it with no replay, or replay from a point`))
		} else {
			writeError(w, errInvalid("the destination is "+mismatch.Status+`: replay "since_`+mismatch.Status+`", or none`))
		}
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("destination "+done+" through the api", "destination", d.ID, "admin", p.admin,
		"write_in_flight", res.WriteInFlight)
	card, err := s.cardWithLag(r.Context(), d) // the same card the GET answers
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, changedCard{Card: card, WriteInFlight: res.WriteInFlight})
}

// forbidOperatorDisabled answers 403 FORBIDDEN for d, disabled by our operators, with
// when and why (the card says the same under "disabled").
func (s *Server) forbidOperatorDisabled(w http.ResponseWriter, r *http.Request, d destination.Destination) {
	msg := "our operators disabled this destination; only they can re-activate it: contact support"
	if card, err := s.opts.Streams.Card(r.Context(), d); err == nil && card.Disabled != nil {
		msg = fmt.Sprintf("our operators disabled this destination on %s (%s); only they can re-activate it: contact support",
			card.Disabled.At.UTC().Format(time.RFC3339), card.Disabled.Reason)
	}
	writeError(w, errForbidden(msg))
}

func (s *Server) test(w http.ResponseWriter, r *http.Request, p principal) {
	d, ok := s.lookup(w, r, p)
	if !ok {
		return
	}
	// Each test is a probe and a session on our one AWS principal: one account's tests
	// must not spend the STS rate every other customer's sessions need.
	g, ok := s.allow(w, r, p, d, testAction)
	if !ok {
		return
	}
	outcome, err := s.opts.Destinations.Test(r.Context(), d.ID)
	s.settle(r.Context(), g, err) // held back by our STS pacing: nothing was sent
	var held dispatch.HeldBack
	if errors.As(err, &held) {
		// The relay's own pacing of STS, not the customer's setup: one sentence, when.
		writeError(w, errExhausted(held.Error(), held.Wait))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"outcome": string(outcome.Class), "message": outcome.Message})
}

func (s *Server) disable(w http.ResponseWriter, r *http.Request, p principal) {
	d, ok := s.lookup(w, r, p)
	if !ok {
		return // another account's id: 404 first, so existence does not leak
	}
	if !p.admin {
		// Disabling cascades over the account's other destinations in the same cloud
		// account or project: an operator's call, not one this scope may take.
		writeError(w, errForbidden("disabling a destination takes an admin token; pause it instead"))
		return
	}
	var body struct {
		Reason string `json:"reason"`
	}
	if b, e := readBody(r); e != nil {
		writeError(w, e)
		return
	} else if len(b) > 0 && json.Unmarshal(b, &body) != nil {
		writeError(w, errInvalid(`the body must be JSON like {"reason":"…"} or empty`))
		return
	}
	res, err := s.opts.Destinations.Disable(r.Context(), d.ID, body.Reason)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("destination disabled through the api", "destination", d.ID, "disabled", res.IDs,
		"writes_in_flight", res.InFlight)
	// writes_in_flight: those of them with a write begun before the disable, which may
	// still land; none starts after this answer, on any replica.
	writeJSON(w, http.StatusOK, map[string][]string{"disabled": nonNil(res.IDs), "writes_in_flight": nonNil(res.InFlight)})
}

func (s *Server) attempts(w http.ResponseWriter, r *http.Request, p principal) {
	d, ok := s.lookup(w, r, p)
	if !ok {
		return
	}
	before, e := intParam(r, "before", 0, 0)
	if e != nil {
		writeError(w, e)
		return
	}
	limit, e := intParam(r, "limit", defaultAttemptsLimit, 1)
	if e != nil {
		writeError(w, e)
		return
	}
	limit = min(limit, maxAttemptsLimit)
	// One more than asked tells whether a next page exists.
	list, err := s.opts.Store.Attempts(r.Context(), store.Ref{Account: d.Account, ID: d.ID}, before, limit+1)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	var next *int64
	if int64(len(list)) > limit {
		list = list[:limit]
		n := list[limit-1].N
		next = &n
	}
	if list == nil {
		list = []store.Attempt{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"attempts": list, "next": next})
}

// intParam reads a query number ≥ least, or def when absent.
func intParam(r *http.Request, name string, def, least int64) (int64, *apiError) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < least {
		return 0, errInvalid(name + " must be a whole number of at least " + strconv.FormatInt(least, 10))
	}
	return n, nil
}

// fail answers for an error of the dispatcher or the channels.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, destination.ErrNotFound):
		writeError(w, errNotFound("no such destination (the config was reloaded?)"))
	case errors.Is(err, stream.ErrCursorExpired):
		writeError(w, errExpired("the cursor is older than what the channel keeps: load a new snapshot"))
	default:
		s.internal(w, r, err)
	}
}

func nonNil(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}
