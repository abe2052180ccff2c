package awstest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// FaultProxy sits in front of an awsJson service (kinesalite) and passes requests
// through, except the ones it was told to fail, which it answers itself in the service's
// error shape without forwarding them.
type FaultProxy struct {
	URL string

	mu    sync.Mutex
	calls []Call
	sts   *STS
	fail  queue[Failure]
}

// Call is one request the proxy received, whether it was forwarded or failed.
type Call struct {
	Operation   string // the X-Amz-Target operation: "PutRecord"
	Input       map[string]any
	AccessKeyID string
	Failed      bool // answered by the proxy with an injected or authorization error
}

// NewFaultProxy starts a proxy to upstream on 127.0.0.1, closed when the test ends.
func NewFaultProxy(t testing.TB, upstream string) *FaultProxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		c := Call{AccessKeyID: accessKeyID(r)}
		_, c.Operation, _ = strings.Cut(r.Header.Get("X-Amz-Target"), ".")
		json.Unmarshal(body, &c.Input)
		f, fail := p.fail.pop()
		if !fail {
			f, fail = p.authorize(r, c)
		}
		c.Failed = fail
		p.mu.Lock()
		p.calls = append(p.calls, c)
		p.mu.Unlock()
		if fail {
			writeJSONError(w, f)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// FailNext answers the next n requests with f.
func (p *FaultProxy) FailNext(n int, f Failure) { p.fail.push(n, f) }

// RequireSessionFrom makes every Kinesis PutRecord prove it was signed with a live
// session s handed out whose session policy allows kinesis:PutRecord on its StreamARN.
func (p *FaultProxy) RequireSessionFrom(s *STS) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sts = s
}

// Calls returns every request received so far, in order.
func (p *FaultProxy) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.calls...)
}

func (p *FaultProxy) authorize(r *http.Request, c Call) (Failure, bool) {
	p.mu.Lock()
	sts := p.sts
	p.mu.Unlock()
	if sts == nil || c.Operation != "PutRecord" {
		return Failure{}, false
	}
	streamARN, _ := c.Input["StreamARN"].(string)
	f, ok := sts.authorize(r, "kinesis:PutRecord", streamARN)
	return f, !ok
}
