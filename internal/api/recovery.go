package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/store"
)

// dryRunAnswer is a replay's dry run: how many events it would send, from where,
// without sending any.
type dryRunAnswer struct {
	DryRun bool `json:"dry_run"`
	// Events the replay would send, in log order, through the log's last event now
	// (before the destination's event filter, as the card's lag); null when the
	// positions cannot tell (an upgraded log, see the card's lag).
	Events *int64 `json:"events"`
	// Cursor is the log id delivery would restart after; From the point, resolved.
	Cursor string `json:"cursor"`
	// FirstAt and LastAt are when the first and last of those events were stored.
	FirstAt *time.Time `json:"first_at"`
	LastAt  *time.Time `json:"last_at"`
	// Pending: the destination is not active; the replay would start at its activation.
	Pending bool `json:"pending"`
}

// replayDryRun answers POST …/replay with "dry_run": true: the count, from positions
// (store.CountReplay: O(1) reads of the ordinal index), and nothing changed. It takes no
// replay from the rate limits: it writes nothing.
func (s *Server) replayDryRun(w http.ResponseWriter, r *http.Request, d destination.Destination, point store.ReplayPoint, afterEvent string) {
	c, err := s.opts.Store.CountReplay(r.Context(), store.Replay{Ref: store.Ref{Account: d.Account, ID: d.ID},
		Point: point, Oldest: s.opts.Destinations.ReplayableFrom()})
	var tooOld store.ErrTooOld
	switch {
	case errors.As(err, &tooOld):
		writeError(w, errTooOld(tooOld.Oldest))
		return
	case errors.Is(err, store.ErrNoSuchEvent):
		writeError(w, errInvalid("the account's log holds no event "+strconv.Quote(afterEvent)+
			" (never received, or older than the log keeps: replay from a time instead)"))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	ans := dryRunAnswer{DryRun: true, Cursor: c.Start, Pending: c.Status != store.Active}
	if c.Known {
		n := c.Events
		ans.Events = &n
	}
	if c.First != "" {
		at := store.IDTime(c.First)
		ans.FirstAt = &at
	}
	if c.Last != "" && c.Known && c.Events > 0 {
		at := store.IDTime(c.Last)
		ans.LastAt = &at
	}
	writeJSON(w, http.StatusOK, ans)
}

// attemptDetailAnswer is one line of the attempt log with what was sent: the message
// as the bus received it, rebuilt from the event's log entry, and the bus's answer
// (the line's outcome and message).
type attemptDetailAnswer struct {
	Attempt store.Attempt     `json:"attempt"`
	Sent    *destination.Sent `json:"sent"`
	// SentNote says why sent is null: the line names no event of the log (a replay
	// asked for, a test), or the log no longer holds it.
	SentNote string `json:"sent_note,omitempty"`
	Answer   answer `json:"answer"`
}

type answer struct {
	Outcome string `json:"outcome"`
	Message string `json:"message"`
}

// attemptDetail answers GET …/attempts/{n}: two reads of single entries (the line and
// the event's log entry, found by its dedup marker) and the message rebuilt in memory.
func (s *Server) attemptDetail(w http.ResponseWriter, r *http.Request, p principal) {
	d, ok := s.lookup(w, r, p)
	if !ok {
		return
	}
	n, ok := attemptNumber(w, r)
	if !ok {
		return
	}
	ref := store.Ref{Account: d.Account, ID: d.ID}
	a, err := s.opts.Store.AttemptAt(r.Context(), ref, n)
	if errors.Is(err, store.ErrNoSuchAttempt) {
		writeError(w, errNotFound("no attempt "+strconv.FormatInt(n, 10)+" in the attempt log of "+strconv.Quote(d.ID)+
			" (never made, or older than the log keeps)"))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	ans := attemptDetailAnswer{Attempt: a, Answer: answer{Outcome: a.Outcome, Message: a.Message}}
	e, err := s.opts.Store.AttemptEntry(r.Context(), ref, a)
	switch {
	case errors.Is(err, store.ErrNoSuchEvent):
		ans.SentNote = "the account's log no longer holds this event (older than the log keeps)"
		if a.EventID == "" || a.Outcome == "replayed" {
			ans.SentNote = "this line names no event: nothing was sent"
		} else if len(a.EventID) > 11 && a.EventID[:11] == "relay.test." {
			ans.SentNote = "a test event, which is not kept"
		}
	case err != nil:
		s.internal(w, r, err)
		return
	default:
		sent, err := s.opts.Destinations.Sent(d.ID, e)
		switch {
		case errors.Is(err, dispatch.ErrNoRender):
			ans.SentNote = err.Error()
		case err != nil:
			ans.SentNote = "the message cannot be rebuilt: " + err.Error()
		default:
			ans.Sent = &sent
		}
	}
	writeJSON(w, http.StatusOK, ans)
}

// minutes answers GET …/minutes: the destination's deliveries and failures per minute
// over the last 24 hours (store.Minutes: one HGETALL of a bounded hash).
func (s *Server) minutes(w http.ResponseWriter, r *http.Request, p principal) {
	d, ok := s.lookup(w, r, p)
	if !ok {
		return
	}
	series, err := s.opts.Store.Minutes(r.Context(), store.Ref{Account: d.Account, ID: d.ID}, time.Now())
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, series)
}
