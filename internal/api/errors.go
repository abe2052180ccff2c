package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// The error codes of the contract, each with its one HTTP status.
const (
	CodeUnauthenticated = "UNAUTHENTICATED"  // 401
	CodeAccessRevoked   = "ACCESS_REVOKED"   // 403
	CodeForbidden       = "FORBIDDEN"        // 403: an action this scope may not take
	CodeNotFound        = "NOT_FOUND"        // 404
	CodeInvalidArgument = "INVALID_ARGUMENT" // 400
	CodeCursorExpired   = "CURSOR_EXPIRED"   // 410
	// CodeFailedPrecondition: the destination is not in a state that allows the action
	// (a retry of a destination that is not active). Added by us to the contract's codes.
	CodeFailedPrecondition = "FAILED_PRECONDITION" // 409
	// CodeResourceExhausted is a limit of one client's share reached: too many open
	// subscriptions, too many tests. With Retry-After when waiting is the answer.
	CodeResourceExhausted = "RESOURCE_EXHAUSTED" // 429
	CodeInternal          = "INTERNAL"           // 500: not in the contract; our fault, logged
	// CodeUnavailable: the relay is starting (serve waiting for Redis); try again.
	// Added by us to the contract's codes.
	CodeUnavailable = "UNAVAILABLE" // 503
	// CodeAlreadyExists: a create named an id some destination has (of whichever
	// source, connector or account: the answer says nothing of whose).
	CodeAlreadyExists = "ALREADY_EXISTS" // 409
)

// apiError is an answer {"error":{"code","message"}} with its status. retryAfter, when
// set, goes out as a Retry-After header and as "details":{"retry_after_seconds":N}.
type apiError struct {
	status     int
	code       string
	message    string
	retryAfter time.Duration
	fields     []fieldProblem // INVALID_ARGUMENT of a body: every problem, each naming its field
}

// fieldProblem is one problem of a body, named by the body's field ("bus_arn",
// "events[1]"), in the config check's words.
type fieldProblem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func errFields(msg string, fields []fieldProblem) *apiError {
	return &apiError{status: http.StatusBadRequest, code: CodeInvalidArgument, message: msg, fields: fields}
}
func errExists(msg string) *apiError {
	return &apiError{status: http.StatusConflict, code: CodeAlreadyExists, message: msg}
}

func errUnauthenticated(msg string) *apiError {
	return &apiError{status: http.StatusUnauthorized, code: CodeUnauthenticated, message: msg}
}
func errRevoked(msg string) *apiError {
	return &apiError{status: http.StatusForbidden, code: CodeAccessRevoked, message: msg}
}
func errForbidden(msg string) *apiError {
	return &apiError{status: http.StatusForbidden, code: CodeForbidden, message: msg}
}
func errNotFound(msg string) *apiError {
	return &apiError{status: http.StatusNotFound, code: CodeNotFound, message: msg}
}
func errInvalid(msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: CodeInvalidArgument, message: msg}
}
func errExpired(msg string) *apiError {
	return &apiError{status: http.StatusGone, code: CodeCursorExpired, message: msg}
}
func errConflict(msg string) *apiError {
	return &apiError{status: http.StatusConflict, code: CodeFailedPrecondition, message: msg}
}
func errInternal() *apiError {
	return &apiError{status: http.StatusInternalServerError, code: CodeInternal, message: "the relay could not answer; see its logs"}
}
func errUnavailable(msg string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, message: msg}
}
func errExhausted(msg string, retryAfter time.Duration) *apiError {
	return &apiError{status: http.StatusTooManyRequests, code: CodeResourceExhausted, message: msg, retryAfter: retryAfter}
}

// Details of an error answer: when to try again.
type errorDetails struct {
	RetryAfterSeconds int64 `json:"retry_after_seconds"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	type body struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details *errorDetails  `json:"details,omitempty"`
		Fields  []fieldProblem `json:"fields,omitempty"`
	}
	b := body{Code: e.code, Message: e.message, Fields: e.fields}
	if e.retryAfter > 0 {
		secs := int64((e.retryAfter + time.Second - 1) / time.Second) // whole seconds, rounded up
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		b.Details = &errorDetails{RetryAfterSeconds: secs}
	}
	writeJSON(w, e.status, map[string]body{"error": b})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a client gone mid-answer: nothing to do
}
