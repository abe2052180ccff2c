package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// APIError is an error answer of the operator API: {"error":{"code","message"}}.
type APIError struct {
	Status     int
	Code       string
	Message    string
	Fields     []FieldProblem // a body's problems, each naming its field
	RetryAfter time.Duration  // a 429's Retry-After, when it gave one in seconds
}

// FieldProblem is one problem of a request body, as an error answer lists it.
type FieldProblem struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	for _, f := range e.Fields {
		s += "\n  " + f.Field + ": " + f.Message
	}
	return s
}

// Caller calls the operator API with a bearer token. The token goes only into the
// Authorization header: never into a URL, an error or a log line.
type Caller struct {
	Base  string       // e.g. http://127.0.0.1:8080
	Token string       // bearer token
	HTTP  *http.Client // nil: http.DefaultClient (no overall timeout: subscriptions are long)
	// Header is sent with every call besides the token (an Idempotency-Key).
	Header http.Header
}

// callTimeout bounds one JSON call that has no deadline of its own.
const callTimeout = 30 * time.Second

// Do sends one JSON call and decodes the answer into out (when not nil and the answer
// has a body: not a 204). An error answer comes back as *APIError.
func (c *Caller) Do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := c.request(ctx, method, path, query, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return decodeError(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// subscribe opens a channel's SSE stream, after the sequence after (none when < 0). It
// returns once the response headers arrived: the server has fixed its starting point.
func (c *Caller) subscribe(ctx context.Context, channel string, after int64) (*http.Response, error) {
	req, err := c.request(ctx, http.MethodGet, ChannelPath(channel, "subscribe"), nil, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if after >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, fmt.Errorf("subscribe %s: answered %q, not text/event-stream", channel, ct)
	}
	return resp, nil
}

func (c *Caller) request(ctx context.Context, method, path string, query url.Values, body io.Reader) (*http.Request, error) {
	u := strings.TrimRight(c.Base, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	return req, nil
}

func (c *Caller) client() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// ChannelPath is the API path of one of a channel's calls (snapshot, events, subscribe).
func ChannelPath(channel, call string) string {
	return "/v1/streams/" + url.PathEscape(channel) + "/" + call
}

func decodeError(resp *http.Response) error {
	var body struct {
		Error struct {
			Code, Message string
			Fields        []FieldProblem
		} `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{Status: resp.StatusCode}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		e.RetryAfter = time.Duration(secs) * time.Second
	}
	if json.Unmarshal(b, &body) != nil || body.Error.Code == "" {
		e.Code, e.Message = "HTTP_"+strconv.Itoa(resp.StatusCode), strings.TrimSpace(string(b))
		return e
	}
	e.Code, e.Message, e.Fields = body.Error.Code, body.Error.Message, body.Error.Fields
	return e
}
