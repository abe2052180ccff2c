package awstest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// EventBridge answers AWSEvents.PutEvents (awsJson1.1) and keeps the entries it took,
// in order. Injected failures are answered without taking anything.
type EventBridge struct {
	URL string

	mu       sync.Mutex
	entries  []Entry
	requests int
	sts      *STS
	fail     queue[ebFailure]
	hold     chan struct{} // non-nil: each PutEvents waits until it is closed
	waiting  int           // PutEvents calls waiting on hold now
	forget   bool          // take entries without keeping them (ForgetEntries)
}

// Entry is one PutEvents entry the bus took.
type Entry struct {
	EventBusName, Source, DetailType, Detail string
	Time                                     time.Time
	Resources                                []string
	AccessKeyID                              string // the key that signed the write
}

type ebFailure struct {
	f     Failure
	entry bool    // a 200 with FailedEntryCount 1, rather than a request error
	body  *string // a 200 with exactly this body
}

// NewEventBridge starts the server on 127.0.0.1, closed when the test ends.
func NewEventBridge(t testing.TB) *EventBridge {
	e := NewEventBridgeHandler()
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	e.URL = srv.URL
	return e
}

// NewEventBridgeHandler returns an EventBridge to serve on a listener of the caller's.
func NewEventBridgeHandler() *EventBridge { return &EventBridge{} }

// ServeHTTP answers one EventBridge JSON request.
func (e *EventBridge) ServeHTTP(w http.ResponseWriter, r *http.Request) { e.serve(w, r) }

// ForgetEntries makes the bus answer each PutEvents as before but keep none of the
// entries it takes from then on (Entries holds only those taken before): a bus that
// lives through millions of writes, as the bench's does, does not grow with them.
func (e *EventBridge) ForgetEntries() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.forget = true
}

// RequireSessionFrom makes every write prove it was signed with a live session s handed
// out whose session policy allows events:PutEvents on the bus, as AWS would check.
func (e *EventBridge) RequireSessionFrom(s *STS) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sts = s
}

// FailNext answers the next n PutEvents calls with the request error f.
func (e *EventBridge) FailNext(n int, f Failure) { e.fail.push(n, ebFailure{f: f}) }

// FailEntries answers the next n PutEvents calls with 200, FailedEntryCount 1 and the
// entry's ErrorCode and ErrorMessage.
func (e *EventBridge) FailEntries(n int, code, message string) {
	e.fail.push(n, ebFailure{f: Failure{Code: code, Message: message}, entry: true})
}

// AnswerNext answers the next n PutEvents calls with 200 and exactly body (which may be
// empty, not JSON, or JSON of any shape), without taking anything: what a sink must make
// of a 200 that is not one EventId for its one entry.
func (e *EventBridge) AnswerNext(n int, body string) {
	e.fail.push(n, ebFailure{body: &body})
}

// Hold makes every PutEvents call from now on wait, counted but not answered, until
// LetWaiting or Release: a write in flight for as long as a test needs.
func (e *EventBridge) Hold() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hold == nil {
		e.hold = make(chan struct{})
	}
}

// LetWaiting lets the calls waiting now go on; later ones still wait.
func (e *EventBridge) LetWaiting() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hold != nil {
		close(e.hold)
		e.hold = make(chan struct{})
	}
}

// Release lets every waiting call go on and stops holding.
func (e *EventBridge) Release() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hold != nil {
		close(e.hold)
		e.hold = nil
	}
}

// Waiting counts the PutEvents calls held now.
func (e *EventBridge) Waiting() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.waiting
}

// Entries returns the entries taken so far, in order.
func (e *EventBridge) Entries() []Entry {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Entry(nil), e.entries...)
}

// EventIDs returns the event_id of each entry the bus busARN took, in order: the relay's
// body carries it at the top. An entry whose Detail has none is an error.
func (e *EventBridge) EventIDs(busARN string) ([]string, error) {
	var ids []string
	for _, x := range e.Entries() {
		if x.EventBusName != busARN {
			continue
		}
		var body struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal([]byte(x.Detail), &body); err != nil || body.EventID == "" {
			return ids, fmt.Errorf("detail %q has no event_id: %v", x.Detail, err)
		}
		ids = append(ids, body.EventID)
	}
	return ids, nil
}

// Requests counts the PutEvents calls received, failed ones included.
func (e *EventBridge) Requests() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.requests
}

// maxEntrySize is EventBridge's limit on one entry as AWS counts it.
const maxEntrySize = 256 * 1024

func (e *EventBridge) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Header.Get("X-Amz-Target") != "AWSEvents.PutEvents" {
		writeJSONError(w, Failure{400, "UnknownOperationException", "only AWSEvents.PutEvents is served here"})
		return
	}
	e.mu.Lock()
	e.requests++
	sts, hold := e.sts, e.hold
	if hold != nil {
		e.waiting++
	}
	e.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
		e.mu.Lock()
		e.waiting--
		e.mu.Unlock()
	}

	var in struct {
		Entries []struct {
			EventBusName, Source, DetailType, Detail string
			Time                                     *json.Number
			Resources                                []string
		}
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || len(in.Entries) == 0 || len(in.Entries) > 10 {
		writeJSONError(w, Failure{400, "ValidationException", fmt.Sprintf("PutEvents takes 1 to 10 entries (%v)", err)})
		return
	}
	if f, ok := e.fail.pop(); ok {
		switch {
		case f.body != nil:
			w.Header().Set("Content-Type", "application/x-amz-json-1.1")
			io.WriteString(w, *f.body)
			return
		case !f.entry:
			writeJSONError(w, f.f)
			return
		}
		writeJSON(w, map[string]any{"FailedEntryCount": 1,
			"Entries": []map[string]string{{"ErrorCode": f.f.Code, "ErrorMessage": f.f.Message}}})
		return
	}
	var took []Entry
	size := 0
	for _, x := range in.Entries {
		if x.Source == "" || x.DetailType == "" || !json.Valid([]byte(x.Detail)) {
			writeJSONError(w, Failure{400, "ValidationException", "each entry needs Source, DetailType and a JSON Detail"})
			return
		}
		if sts != nil {
			if f, ok := sts.authorize(r, "events:PutEvents", x.EventBusName); !ok {
				writeJSONError(w, f)
				return
			}
		}
		size += 14 + len(x.Source) + len(x.DetailType) + len(x.Detail)
		for _, res := range x.Resources {
			size += len(res)
		}
		ent := Entry{EventBusName: x.EventBusName, Source: x.Source, DetailType: x.DetailType, Detail: x.Detail,
			Resources: x.Resources, AccessKeyID: accessKeyID(r)}
		if x.Time != nil {
			secs, _ := x.Time.Float64()
			whole, frac := math.Modf(secs)
			ent.Time = time.Unix(int64(whole), int64(frac*1e9)).UTC().Round(time.Millisecond)
		}
		took = append(took, ent)
	}
	if size > maxEntrySize {
		writeJSONError(w, Failure{400, "ValidationException", "Total size of the entries in the request is over the limit."})
		return
	}
	e.mu.Lock()
	if !e.forget {
		e.entries = append(e.entries, took...)
	}
	e.mu.Unlock()
	out := make([]map[string]string, len(took))
	for i := range out {
		out[i] = map[string]string{"EventId": eventID()}
	}
	writeJSON(w, map[string]any{"FailedEntryCount": 0, "Entries": out})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	json.NewEncoder(w).Encode(v)
}

// eventID is an id in the form EventBridge gives each event it takes: a random
// lowercase UUID ("11710aed-b79e-4468-a20b-bb3c0c3b4860").
func eventID() string {
	h := RandomHex(16)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
