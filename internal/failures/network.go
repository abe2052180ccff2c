package failures

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"syscall"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// httpStatus is the HTTP status of the response in err's chain, or 0. The SDK's
// awshttp.ResponseError answers errors.As for the smithy one it embeds.
func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.Response.Response == nil {
		return 0 // no response: the request never got one (network, timeout)
	}
	return re.Response.StatusCode
}

// httpVerdict classifies a response that carried no typed code.
func httpVerdict(status int) verdict {
	code := "HTTP " + strconv.Itoa(status)
	switch {
	case status == 429:
		return verdict{code: code, outcome: notTaken("the bus is throttling writes", code, "")}
	case status == 408:
		return verdict{code: code, outcome: notTaken("the request timed out on the bus's side", code, "")}
	case status == 401:
		// AWS sends 401 only when it does not accept our own signature or session.
		return verdict{code: code, outcome: notTaken("the bus did not accept our own credentials", code, onOurSide)}
	case status >= 500:
		return verdict{code: code, outcome: notTaken("the bus answered with a server error", code, "")}
	case status == 403:
		return verdict{code: code, outcome: rejected("the bus refused the write", code, "check the role's permissions policy")}
	case status == 404:
		return verdict{code: code, outcome: rejected("the bus or stream was not found", code, "check the ARN on the destination")}
	case status == 413:
		return verdict{code: code, outcome: rejected("the event is too large for the bus", code, "")}
	case status >= 400:
		return verdict{code: code, outcome: rejected("the bus refused the write", code, "")}
	}
	return verdict{code: code, outcome: notTaken("the bus answered with an unexpected status", code, "")}
}

// networkVerdict recognises cancellation, timeouts and connection failures talking
// to the bus, STS or Google sign-in. All are not taken.
func networkVerdict(err error) (verdict, bool) {
	// Cancellation comes first: a write cut short by shutdown is not the bus's fault.
	if errors.Is(err, context.Canceled) {
		return verdict{code: "canceled", outcome: notTaken(
			"the write was cancelled before the bus answered, as when the relay shuts down", "canceled", "it will be retried")}, true
	}
	if isTimeout(err) {
		detail := "timeout"
		if op := opError(err); op != "" {
			detail += ": " + op
		}
		// A write that timed out may still have landed: the retry is dropped by event_id.
		return verdict{code: "timeout", outcome: notTaken("the bus did not answer in time", detail,
			"retrying with backoff; the event may have landed, and receivers drop a repeat by event_id")}, true
	}
	var reason string
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var urlErr *url.Error
	var sendErr *smithyhttp.RequestSendError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		reason = "could not reach the bus: the connection was refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		reason = "the connection to the bus was broken"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		reason = "could not reach the bus: the network is unreachable"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		reason = "the connection to the bus closed before its answer"
	case errors.As(err, &dnsErr):
		reason = "could not reach the bus: its address did not resolve"
	case errors.As(err, &opErr), errors.As(err, &urlErr), errors.As(err, &sendErr):
		reason = "could not reach the bus"
	default:
		return verdict{}, false
	}
	detail := opError(err)
	if detail == "" {
		detail = err.Error()
	}
	return verdict{code: "network", outcome: notTaken(reason, detail, "")}, true
}

// isTimeout reports a context deadline or any error in the chain that says it is a
// timeout (net.Error, os.ErrDeadlineExceeded, the SDK's timeout errors).
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// opError is the text of the network operation that failed ("dial tcp 10.0.0.1:443:
// connect: connection refused"): it names the address, never a credential.
func opError(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return op.Error()
	}
	return ""
}
