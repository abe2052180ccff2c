// Package contracttest checks every request a test sends to the relay, and every answer
// it gets, against the API's OpenAPI document (api/openapi.yaml), with kin-openapi's
// openapi3filter: route, parameters, body, status, headers, and each SSE frame. A test
// puts it in front of a handler (Wrap) or of a running relay (Proxy); what does not match
// fails the test. It is test support only; the relay never imports it.
package contracttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	apidoc "github.com/mercamap/relay/api"
)

// Checker checks the requests and answers of one test.
type Checker struct {
	t      testing.TB
	doc    *openapi3.T
	router routers.Router

	wg       sync.WaitGroup // checks under way
	mu       sync.Mutex
	problems []string
}

var (
	loadOnce  sync.Once
	loaded    *openapi3.T
	notARoute *openapi3.Responses // the document's x-not-a-route: what a path that is not a route answers
	loadErr   error
)

// Document is the API's OpenAPI document, loaded and validated once per test binary.
// The document read is api/openapi.yaml, or RELAY_OPENAPI_DOCUMENT when set (a broken
// copy, to see that the suites fail on it).
func Document() (*openapi3.T, error) {
	loadOnce.Do(func() {
		data := apidoc.YAML
		if p := os.Getenv("RELAY_OPENAPI_DOCUMENT"); p != "" {
			if data, loadErr = os.ReadFile(p); loadErr != nil {
				return
			}
		}
		for _, ct := range []string{"text/event-stream", "text/html", "text/javascript", "text/css"} {
			openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
		}
		loader := openapi3.NewLoader()
		loaded, loadErr = loader.LoadFromData(data)
		if loadErr == nil {
			// Its examples are Redocly's to check (api's lint test): a copy broken on purpose keeps
			// the real examples, and must still load.
			loadErr = loaded.Validate(context.Background(), openapi3.DisableExamplesValidation())
		}
		if loadErr == nil {
			notARoute, loadErr = unroutedAnswers(loaded)
		}
		if loadErr != nil {
			loadErr = fmt.Errorf("the OpenAPI document: %w", loadErr)
			return
		}
		// Requests reach test servers on any address: route by path alone.
		loaded.Servers = nil
		for _, item := range loaded.Paths.Map() {
			item.Servers = nil
			for _, op := range item.Operations() {
				op.Servers = nil
			}
		}
	})
	return loaded, loadErr
}

// NotARoute is the extension of the document's root that lists what a request answers
// whose path is none of the document's paths (OpenAPI has no path that stands for every
// other): {"description", "responses": {status: {"$ref": "#/components/responses/…"}}}.
const NotARoute = "x-not-a-route"

// unroutedAnswers reads doc's NotARoute responses, each a reference to one of its
// components' responses.
func unroutedAnswers(doc *openapi3.T) (*openapi3.Responses, error) {
	ext, ok := doc.Extensions[NotARoute]
	if !ok {
		return nil, errors.New("no " + NotARoute + ": what a path that is not a route answers")
	}
	raw, err := json.Marshal(ext)
	if err != nil {
		return nil, err
	}
	var x struct {
		Responses *openapi3.Responses `json:"responses"`
	}
	if err := json.Unmarshal(raw, &x); err != nil || x.Responses == nil || x.Responses.Len() == 0 {
		return nil, fmt.Errorf("%s has no responses (%v)", NotARoute, err)
	}
	for status, ref := range x.Responses.Map() {
		name, ok := strings.CutPrefix(ref.Ref, "#/components/responses/")
		component := doc.Components.Responses[name]
		if !ok || component == nil {
			return nil, fmt.Errorf("%s %s: %q is none of the document's responses", NotARoute, status, ref.Ref)
		}
		ref.Value = component.Value
	}
	return x.Responses, nil
}

// New returns a Checker that reports to t when t's cleanups run: register it before
// the servers it watches, so their last answers are checked before it reports.
func New(t testing.TB) *Checker {
	t.Helper()
	doc, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	router, err := gorillamux.NewRouter(doc) // a trailing slash is its own route, as net/http has it
	if err != nil {
		t.Fatal(err)
	}
	c := &Checker{t: t, doc: doc, router: router}
	t.Cleanup(c.report)
	return c
}

func (c *Checker) report() {
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.problems {
		c.t.Errorf("the answer does not match api/openapi.yaml: %s", p)
	}
	c.problems = nil
}

func (c *Checker) fail(r *http.Request, status int, format string, args ...any) {
	msg := fmt.Sprintf("%s %s → %d: ", r.Method, r.URL.RequestURI(), status) + fmt.Sprintf(format, args...)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.problems = append(c.problems, msg)
}

// Proxy starts a reverse proxy to target (a base URL, like http://127.0.0.1:8080) that
// checks everything through it, and returns its URL. It stops when the test ends.
func (c *Checker) Proxy(target string) string {
	c.t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		c.t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // SSE frames go through as they are written
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		// The relay did not answer (stopped, killed by the test): nothing of it to check.
		if unanswered, ok := r.Context().Value(unansweredKey{}).(*atomic.Bool); ok {
			unanswered.Store(true)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
	hs := httptest.NewServer(c.Wrap(rp))
	c.t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs.URL
}

// Wrap checks each request to next, and next's answer.
func (c *Checker) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil && r.Body != http.NoBody {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		route, params, routeErr := c.router.FindRoute(r)
		var reqErr error
		var input *openapi3filter.RequestValidationInput
		if routeErr == nil {
			check := r.Clone(r.Context())
			check.Body = io.NopCloser(bytes.NewReader(body))
			if len(body) > 0 && check.Header.Get("Content-Type") == "" {
				check.Header.Set("Content-Type", "application/json") // the relay reads every body as JSON
			}
			input = &openapi3filter.RequestValidationInput{Request: check, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}}
			reqErr = openapi3filter.ValidateRequest(r.Context(), input)
		}
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		unanswered := &atomic.Bool{}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), unansweredKey{}, unanswered)))
		if unanswered.Load() {
			return
		}
		// Checked aside, so the check adds no time to the answer (tests time some).
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.checkAnswer(r, route, input, routeErr, reqErr, rec)
		}()
	})
}

func (c *Checker) checkAnswer(r *http.Request, route *routers.Route, input *openapi3filter.RequestValidationInput,
	routeErr, reqErr error, rec *recorder) {
	status := rec.status
	switch {
	case routeErr != nil:
		// A path that is not a route answers what the document's NotARoute lists, and a
		// 404 is the contract's NOT_FOUND.
		if status == http.StatusNotFound && !isError(rec.body.Bytes(), "NOT_FOUND") {
			c.fail(r, status, "a path that is not a route (%v) answers 404 without NOT_FOUND", routeErr)
		}
		route = &routers.Route{Spec: c.doc, Path: r.URL.Path, Method: r.Method, Operation: &openapi3.Operation{Responses: notARoute}}
		input = &openapi3filter.RequestValidationInput{Request: r, Route: route}
	case reqErr != nil && status/100 == 2:
		c.fail(r, status, "the request does not match the document, yet the relay took it: %v", reqErr)
	}
	if rec.sse {
		for _, p := range checkFrames(rec.body.Bytes()) {
			c.fail(r, status, "an event-stream frame: %s", p)
		}
	}
	if err := validateAnswer(input, status, rec); err != nil {
		c.fail(r, status, "%v\nbody: %.400s", err, rec.body.String())
	}
	if status == http.StatusTooManyRequests && rec.header.Get("Retry-After") == "" && !retryAfterless(rec.body.Bytes()) {
		c.fail(r, status, "429 without Retry-After")
	}
	if routeErr == nil {
		c.example(route, status, rec)
	}
}

// validateAnswer checks an answer against the document's response for its status. A
// response the document gives no content has no body. openapi3filter passes a redirect
// (301, 307, 308) or a 304 without a look, so those are checked as a 200 of the same
// documented response would be: listed, with its headers (a redirect's Location).
func validateAnswer(input *openapi3filter.RequestValidationInput, status int, rec *recorder) error {
	responses := input.Route.Operation.Responses
	ref := responses.Status(status)
	if ref == nil {
		ref = responses.Default()
	}
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("status %d is not in the document", status)
	}
	if len(ref.Value.Content) == 0 && rec.body.Len() > 0 {
		return fmt.Errorf("the document gives %d no body, yet it has one", status)
	}
	switch status {
	case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusNotModified:
		route, op := *input.Route, *input.Route.Operation
		op.Responses = openapi3.NewResponses(openapi3.WithStatus(http.StatusOK, ref))
		route.Operation = &op
		as200 := *input
		as200.Route = &route
		input, status = &as200, http.StatusOK
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: input, Status: status, Header: rec.header,
		Body:    io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: rec.sse}}
	return openapi3filter.ValidateResponse(context.Background(), out)
}

// unansweredKey marks, in a proxied request's context, that the relay gave no answer.
type unansweredKey struct{}

// retryAfterless is a 429 whose waiting would not help (a cap, not a rate), which says
// so by leaving details out.
func retryAfterless(body []byte) bool {
	var e struct {
		Error struct {
			Details *struct{} `json:"details"`
		} `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error.Details == nil
}

func isError(body []byte, code string) bool {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error.Code == code && e.Error.Message != ""
}

// example writes the first answer of each operation and status to
// $RELAY_OPENAPI_EXAMPLES/<operation>.<status>.json when that is set: the document's
// examples are taken from them.
func (c *Checker) example(route *routers.Route, status int, rec *recorder) {
	dir := os.Getenv("RELAY_OPENAPI_EXAMPLES")
	if dir == "" || route == nil || route.Operation == nil || rec.sse {
		return
	}
	p := filepath.Join(dir, fmt.Sprintf("%s.%d.json", route.Operation.OperationID, status))
	if _, err := os.Stat(p); err == nil {
		return
	}
	_ = os.WriteFile(p, rec.body.Bytes(), 0o644)
}

// maxKept bounds what a recorder keeps of one answer (an event stream's frames).
const maxKept = 8 << 20

// recorder passes an answer through while keeping a copy of it, and of its headers as
// they were when it began.
type recorder struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
	header      http.Header
	body        bytes.Buffer
	sse         bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.wroteHeader, r.status, r.header = true, code, r.Header().Clone()
		r.sse = strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream")
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wroteHeader {
		r.WriteHeader(http.StatusOK)
	}
	if r.body.Len() < maxKept {
		r.body.Write(b)
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// checkFrames checks an event stream's frames: each event's data (the event as a
// replay shows it) against the document's ChannelEvent, a pointer's against
// RelayPointer. A frame cut off at the end (the stream closed mid-write) is left out.
func checkFrames(stream []byte) (problems []string) {
	doc, _ := Document()
	var id, event, data string
	lines := strings.Split(string(stream), "\n")
	for i, line := range lines {
		if i == len(lines)-1 {
			break // after the last newline: an unfinished line
		}
		switch {
		case line == "":
			if event != "" || data != "" {
				if err := checkFrame(doc, id, event, data); err != nil {
					problems = append(problems, err.Error())
				}
			}
			id, event, data = "", "", ""
		case strings.HasPrefix(line, ":"): // a comment: subscribed, keep-alive
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		default:
			problems = append(problems, fmt.Sprintf("a line no frame has: %q", line))
		}
	}
	return problems
}

func checkFrame(doc *openapi3.T, id, event, data string) error {
	if id == "" {
		return fmt.Errorf("event %s without an id", event)
	}
	var v any
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		return fmt.Errorf("event %s: data is not JSON: %v", event, err)
	}
	schemas := doc.Components.Schemas
	if event == "relay-pointer/1" {
		return visit(schemas["RelayPointer"], v, event)
	}
	if err := visit(schemas["ChannelEvent"], v, event); err != nil {
		return err
	}
	if typ, _ := v.(map[string]any)["type"].(string); typ != event {
		return fmt.Errorf("a frame of event %s holds an event of type %q", event, typ)
	}
	return nil
}

func visit(s *openapi3.SchemaRef, v any, what string) error {
	if s == nil || s.Value == nil {
		return errors.New("the document has no schema for " + what)
	}
	if err := s.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	return nil
}
