// Package client calls a relay's API from Go: typed requests and answers (types.gen.go,
// generated from the API's OpenAPI document, api/openapi.yaml), a typed *Error, pages
// followed, Retry-After honoured on 429, an Idempotency-Key on create, and a channel
// followed as the contract says (Follow). It is the relay's public client: `relay`'s
// own API commands use it. It never puts the token anywhere but the Authorization header.
package client

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../api/openapi.yaml

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mercamap/relay/internal/stream"
)

// Client calls one relay with one bearer token. Its zero value is not usable: use New.
type Client struct {
	base  string
	token string
	opts  Options
}

// Options change a Client.
type Options struct {
	// HTTPClient sends the calls (nil: http.DefaultClient; a subscription is long, so an
	// overall Timeout there ends it).
	HTTPClient *http.Client
	// RetryLimit is how many times a call answered 429 with Retry-After is sent again
	// after waiting what it says (0: 3; negative: never).
	RetryLimit int
	// MaxRetryWait is the longest Retry-After waited for (0: one minute); a longer one
	// comes back as the *Error, as does any wait past the context's deadline.
	MaxRetryWait time.Duration
	// CallTimeout bounds a call whose context has no deadline (0: 30 s). Follow's
	// subscription is not bound by it.
	CallTimeout time.Duration
}

// New returns a Client of the relay at baseURL (like http://127.0.0.1:8080) that calls
// with token.
func New(baseURL, token string, opts Options) *Client {
	if opts.RetryLimit == 0 {
		opts.RetryLimit = 3
	}
	if opts.MaxRetryWait == 0 {
		opts.MaxRetryWait = time.Minute
	}
	if opts.CallTimeout == 0 {
		opts.CallTimeout = 30 * time.Second
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, opts: opts}
}

// BaseURL is the relay's address the client calls.
func (c *Client) BaseURL() string { return c.base }

// Error is an error answer of the API: its status, its contract code, the message in
// words, each problem of a body (Fields) and, on a 429, how long to wait (RetryAfter).
type Error struct {
	Status     int
	Code       ErrorCode
	Message    string
	Fields     []FieldProblem
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	for _, f := range e.Fields {
		s += "\n  " + f.Field + ": " + f.Message
	}
	return s
}

// IsCode reports whether err is an *Error with code.
func IsCode(err error, code ErrorCode) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// The error codes of the contract (ErrorCode's values).
const (
	CodeUnauthenticated    ErrorCode = "UNAUTHENTICATED"
	CodeAccessRevoked      ErrorCode = "ACCESS_REVOKED"
	CodeForbidden          ErrorCode = "FORBIDDEN"
	CodeNotFound           ErrorCode = "NOT_FOUND"
	CodeInvalidArgument    ErrorCode = "INVALID_ARGUMENT"
	CodeCursorExpired      ErrorCode = "CURSOR_EXPIRED"
	CodeFailedPrecondition ErrorCode = "FAILED_PRECONDITION"
	CodeAlreadyExists      ErrorCode = "ALREADY_EXISTS"
	CodeResourceExhausted  ErrorCode = "RESOURCE_EXHAUSTED"
	CodeInternal           ErrorCode = "INTERNAL"
	CodeUnavailable        ErrorCode = "UNAVAILABLE"
)

// call is one request: its route, query, body and extra headers.
type call struct {
	method, path string
	query        url.Values
	body         any
	header       http.Header
}

// do sends cl and decodes a 2xx answer's body into out (when not nil). A 429 with
// Retry-After is sent again after the wait, up to RetryLimit times.
func (c *Client) do(ctx context.Context, cl call, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.CallTimeout)
		defer cancel()
	}
	var body []byte
	if cl.body != nil {
		var err error
		if body, err = json.Marshal(cl.body); err != nil {
			return err
		}
	}
	for tries := 0; ; tries++ {
		err := c.once(ctx, cl, body, out)
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || e.RetryAfter <= 0 ||
			tries >= c.opts.RetryLimit || e.RetryAfter > c.opts.MaxRetryWait {
			return err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < e.RetryAfter {
			return err // waiting would outlast the caller's deadline
		}
		t := time.NewTimer(e.RetryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// once sends cl one time through the channel follower's caller (stream.Caller: the
// token only in the Authorization header), its body already encoded.
func (c *Client) once(ctx context.Context, cl call, body []byte, out any) error {
	caller := stream.Caller{Base: c.base, Token: c.token, HTTP: c.opts.HTTPClient, Header: cl.header}
	var b any
	if body != nil {
		b = json.RawMessage(body)
	}
	return asError(caller.Do(ctx, cl.method, cl.path, cl.query, b, out))
}

// path joins the route's parts, each escaped.
func path(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString("/")
		b.WriteString(url.PathEscape(p))
	}
	return b.String()
}
