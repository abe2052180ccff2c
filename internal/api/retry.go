package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/mercamap/relay/internal/store"
)

// retry answers POST …/{id}/attempts/{n}/retry: the message of attempt n is queued to
// be written once more, outside the ordered stream, by the destination's lease holder.
// 202 with the request's own line in the attempt log; 404 for an attempt the log does
// not hold; 409 FAILED_PRECONDITION when the destination is not active or the event is
// no longer in the account's log; 400 for an attempt that ended no message.
func (s *Server) retry(w http.ResponseWriter, r *http.Request, p principal) {
	d, ok := s.lookup(w, r, p)
	if !ok {
		return
	}
	n, ok := attemptNumber(w, r)
	if !ok {
		return
	}
	g, ok := s.allow(w, r, p, d, plainAction)
	if !ok {
		return
	}
	req, err := s.opts.Destinations.Retry(r.Context(), d.ID, n)
	s.settle(r.Context(), g, err)
	var notActive store.ErrNotActive
	var notRetryable store.ErrNotRetryable
	switch {
	case errors.Is(err, store.ErrNoSuchAttempt):
		writeError(w, errNotFound("no attempt "+strconv.FormatInt(n, 10)+" in the attempt log of "+strconv.Quote(d.ID)+
			" (never made, or older than the log keeps)"))
		return
	case errors.As(err, &notActive):
		writeError(w, errConflict("the destination is "+notActive.Status+": a retry is written only to an active destination; activate it first"))
		return
	case errors.As(err, &notRetryable):
		writeError(w, errInvalid(notRetryable.Reason))
		return
	case errors.Is(err, store.ErrEventGone):
		writeError(w, errConflict("the account's log no longer holds the event of attempt "+strconv.FormatInt(n, 10)+
			" (older than the log keeps): it cannot be written again"))
		return
	case errors.Is(err, store.ErrRetryQueueFull):
		writeError(w, errExhausted("too many retries wait for this destination ("+strconv.Itoa(store.MaxQueuedRetries)+
			"); try again once they are done", 0))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	s.log.Info("retry asked for through the api", "destination", d.ID, "admin", p.admin, "retry_of", n,
		"event_id", req.EventID, "attempt", req.Attempt)
	writeJSON(w, http.StatusAccepted, retryAnswer{Attempt: req.Attempt, RetryOf: req.RetryOf, EventID: req.EventID})
}

// retryAnswer is the answer to a retry: the attempt-log line that records the request
// (the outcome's line, once written, names it as "retry"), the attempt retried and its
// event.
type retryAnswer struct {
	Attempt int64  `json:"attempt"`
	RetryOf int64  `json:"retry_of"`
	EventID string `json:"event_id"`
}

// attemptNumber reads the path's {n}, an attempt's number in the attempt log; a bad one
// is answered 400 and ok is false.
func attemptNumber(w http.ResponseWriter, r *http.Request) (n int64, ok bool) {
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 1 {
		writeError(w, errInvalid("the attempt must be its number n from the attempt log, a whole number of at least 1"))
		return 0, false
	}
	return n, true
}
