package api

import (
	"encoding/json"
	"net/http"
)

// The error codes of the contract, each with its one HTTP status.
const (
	CodeUnauthenticated = "UNAUTHENTICATED"  // 401
	CodeAccessRevoked   = "ACCESS_REVOKED"   // 403
	CodeNotFound        = "NOT_FOUND"        // 404
	CodeInvalidArgument = "INVALID_ARGUMENT" // 400
	CodeCursorExpired   = "CURSOR_EXPIRED"   // 410
	CodeInternal        = "INTERNAL"         // 500: not in the contract; our fault, logged
)

// apiError is an answer {"error":{"code","message"}} with its status.
type apiError struct {
	status  int
	code    string
	message string
}

func errUnauthenticated(msg string) *apiError {
	return &apiError{http.StatusUnauthorized, CodeUnauthenticated, msg}
}
func errRevoked(msg string) *apiError  { return &apiError{http.StatusForbidden, CodeAccessRevoked, msg} }
func errNotFound(msg string) *apiError { return &apiError{http.StatusNotFound, CodeNotFound, msg} }
func errInvalid(msg string) *apiError {
	return &apiError{http.StatusBadRequest, CodeInvalidArgument, msg}
}
func errExpired(msg string) *apiError { return &apiError{http.StatusGone, CodeCursorExpired, msg} }
func errInternal() *apiError {
	return &apiError{http.StatusInternalServerError, CodeInternal, "the relay could not answer; see its logs"}
}

func writeError(w http.ResponseWriter, e *apiError) {
	type body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	writeJSON(w, e.status, map[string]body{"error": {Code: e.code, Message: e.message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a client gone mid-answer: nothing to do
}
