// Package failures decides what a failed write means: delivered, not taken (retried,
// never counted) or rejected (the message ends and counts against the destination),
// with the sentence a customer reads on the card. It is pure: it never retries, sleeps
// or touches state — dispatch acts on what it returns.
package failures

import (
	"errors"
	"strings"
	"time"

	"github.com/aws/smithy-go"
)

// Class is the outcome class of one attempt.
type Class string

const (
	Delivered Class = "delivered"
	NotTaken  Class = "not_taken" // the bus did not take the event: retried later, never counted
	Rejected  Class = "rejected"  // the message ends and the destination's count goes up
)

// Outcome is a class with the sentence the card shows.
type Outcome struct {
	Class   Class
	Message string
}

// Error is a failure whose class its producer already knows (a sink, the STS probe,
// the label check), with a sentence a customer can act on.
type Error struct {
	Class   Class
	Message string
	Err     error // the underlying error, if any (not shown on the card)
	// Wait, on a not-taken error, is the least time before another attempt can succeed
	// (a spent STS budget, a session backoff): dispatch waits at least that long.
	Wait time.Duration
	// Reason, on a rejection, is the code of a security reason (ReasonExternalIDNotEnforced):
	// not a setup step missing but a setup that would let others in. "" for none.
	Reason string
	// Held, on a not-taken error, says the relay's own pacing held the attempt back
	// (the STS budget) and nothing was sent: it says nothing of the customer's setup, so
	// a pending card keeps its last refusal and "send a test" answers when to try again.
	Held bool
}

// ReasonExternalIDNotEnforced: the role let the probe in with a wrong ExternalId, so
// any AWS customer of ours could name it. The card marks it (pending.security) and
// relay_setup_refused_total counts it by this code.
const ReasonExternalIDNotEnforced = "external_id_not_enforced"

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// NewNotTaken says the bus did not take the event, and why.
func NewNotTaken(message string, err error) error {
	return &Error{Class: NotTaken, Message: message, Err: err}
}

// NewNotTakenFor says the bus did not take the event, and that the next attempt cannot
// succeed before wait has passed.
func NewNotTakenFor(message string, wait time.Duration, err error) error {
	return &Error{Class: NotTaken, Message: message, Err: err, Wait: wait}
}

// NewHeldBack says the relay's own pacing held the attempt back for wait: nothing was
// sent. message is the card's sentence for a write held back (not taken).
func NewHeldBack(message string, wait time.Duration) error {
	return &Error{Class: NotTaken, Message: message, Wait: wait, Held: true}
}

// HeldBackFor reports whether err is the relay's own pacing holding an attempt back
// (NewHeldBack), and for how long.
func HeldBackFor(err error) (time.Duration, bool) {
	var fe *Error
	if errors.As(err, &fe) && fe.Class == NotTaken && fe.Held {
		return fe.Wait, true
	}
	return 0, false
}

// Wait is how long err's producer said the next attempt must wait; 0 when it said nothing.
func Wait(err error) time.Duration {
	var fe *Error
	if errors.As(err, &fe) && fe.Class == NotTaken {
		return fe.Wait
	}
	return 0
}

// NewRejected says the event was refused for a reason the customer must fix.
func NewRejected(message string, err error) error {
	return &Error{Class: Rejected, Message: message, Err: err}
}

// NewRejectedFor is NewRejected for a security reason (ReasonExternalIDNotEnforced).
func NewRejectedFor(reason, message string, err error) error {
	return &Error{Class: Rejected, Message: message, Err: err, Reason: reason}
}

// Reason is the security reason code of a rejection err's producer gave; "" for none.
func Reason(err error) string {
	var fe *Error
	if errors.As(err, &fe) && fe.Class == Rejected {
		return fe.Reason
	}
	return ""
}

// Classify turns any error from a write into exactly one outcome. nil is delivered.
func Classify(err error) Outcome {
	if err == nil {
		return Outcome{Class: Delivered, Message: "delivered"}
	}
	var fe *Error
	if errors.As(err, &fe) {
		return Outcome{Class: fe.Class, Message: fe.Message}
	}
	return classifyTransport(err)
}

// Code is the typed code behind err, for logs and metric labels: an AWS error code
// ("ThrottlingException"), an EventBridge entry code, a gRPC code ("UNAVAILABLE"), an
// HTTP status ("HTTP 503"), or "timeout", "canceled", "network", "unreadable". It is ""
// for nil and for errors that carry no typed code. Like Classify, it never reads error
// text.
func Code(err error) string {
	if err == nil {
		return ""
	}
	return inspect(err).code
}

// classifyTransport is the typed-code table: SDK API errors, gRPC status codes,
// HTTP statuses, network errors and timeouts.
func classifyTransport(err error) Outcome {
	return inspect(err).outcome
}

// verdict is what inspect found: the typed code and the outcome it means.
type verdict struct {
	code    string
	outcome Outcome
}

// inspect walks err's chain for the most specific typed signal, in this order:
// an EventBridge entry code, an unreadable success answer, an AWS API error code (with
// the HTTP status as the fallback for codes we do not list), a gRPC status, a bare HTTP
// status, then cancellation, timeouts and network errors. Anything else is not
// recognised and not taken: retried until the message's age limit, never counted.
func inspect(err error) verdict {
	var ee *entryError
	if errors.As(err, &ee) {
		return entryVerdict(ee)
	}
	var ue *unreadableError
	if errors.As(err, &ue) {
		return unreadableVerdict(ue)
	}
	// A success status whose body the SDK could not read: an error status with an
	// unreadable body is left to the status below.
	var de *smithy.DeserializationError
	if status := httpStatus(err); errors.As(err, &de) && (status == 0 || status/100 == 2) {
		return unreadableVerdict(&unreadableError{detail: de.Error(), err: de})
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return awsVerdict(apiErr, httpStatus(err))
	}
	if st, ok := grpcStatus(err); ok {
		return grpcVerdict(st)
	}
	if code := httpStatus(err); code != 0 {
		return httpVerdict(code)
	}
	if v, ok := networkVerdict(err); ok {
		return v
	}
	return verdict{outcome: notTaken("the error was not recognised", err.Error(),
		"retrying with backoff until the message's age limit")}
}

// notTaken builds a not-taken sentence: it always starts "did not take the event".
// detail is the typed code and the service's own message; tail says what happens next
// ("retrying with backoff" when empty).
func notTaken(reason, detail, tail string) Outcome {
	if tail == "" {
		tail = "retrying with backoff"
	}
	return Outcome{Class: NotTaken, Message: "did not take the event: " + reason + parens(detail) + "; " + tail}
}

// rejected builds a rejected sentence: what was refused, the typed code with the
// service's own message (it names the resource), and what the customer can fix.
func rejected(reason, detail, fix string) Outcome {
	m := reason + parens(detail)
	if fix != "" {
		m += " — " + fix
	}
	return Outcome{Class: Rejected, Message: m}
}

// parens quotes detail (the typed code and the service's own message, which leads with
// the code) in parentheses, cut to its first MaxDetail characters: a bus may answer with
// kilobytes of text, and the card, every channel event and the operator event carry it.
func parens(detail string) string {
	if detail == "" {
		return ""
	}
	return " (" + Head(detail, MaxDetail) + ")"
}

// MaxDetail is how many characters of a service's own message a sentence quotes.
const MaxDetail = 300

// Head is s cut to at most n characters, ending in "…" when it was cut.
func Head(s string, n int) string {
	if len(s) <= n { // bytes ≥ characters: short enough already
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n {
			return strings.TrimRight(s[:i], " \t\n") + "…"
		}
		count++
	}
	return s
}

// codeDetail is "Code: message", or the code alone when the service sent no message.
func codeDetail(code, message string) string {
	message = strings.TrimSpace(message)
	switch {
	case code == "" && message == "":
		return "no error code"
	case code == "":
		return message
	case message == "":
		return code
	}
	return code + ": " + message
}
