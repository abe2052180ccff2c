package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// throttleProxy is an HTTP reverse proxy the drill puts between the relays and the
// sandbox's EventBridge. While throttling, it answers every second PutEvents itself,
// as EventBridge does when a bus is over its rate, and forwards everything else.
type throttleProxy struct {
	URL string // what the relays' aws.endpoints.events points at

	srv   *http.Server
	proxy *httputil.ReverseProxy

	mu        sync.Mutex
	on        bool
	seen      int // PutEvents requests since the window opened
	throttled int // of those, answered ThrottlingException (over every window)
	inWindow  int // PutEvents requests seen while throttling (over every window)
}

// startThrottleProxy listens on 127.0.0.1 (a free port) in front of upstream.
func startThrottleProxy(upstream string) (*throttleProxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	// The Host header is left as the relay signed it; only the connection goes upstream.
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	p := &throttleProxy{URL: "http://" + ln.Addr().String(), proxy: rp}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *throttleProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Amz-Target") == "AWSEvents.PutEvents" {
		p.mu.Lock()
		throttle := false
		if p.on {
			p.seen++
			p.inWindow++
			if throttle = p.seen%2 == 0; throttle {
				p.throttled++
			}
		}
		p.mu.Unlock()
		if throttle {
			_, _ = io.Copy(io.Discard, r.Body)
			writeThrottling(w)
			return
		}
	}
	p.proxy.ServeHTTP(w, r)
}

// writeThrottling answers as EventBridge does over its rate (awsJson1_1): the SDK reads
// the code from X-Amzn-ErrorType, then from __type.
func writeThrottling(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-ErrorType", "ThrottlingException")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = io.WriteString(w, `{"__type":"ThrottlingException","message":"Rate exceeded"}`)
}

// begin opens a throttle window: from here every second PutEvents is answered.
func (p *throttleProxy) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on, p.seen = true, 0
}

// end closes the window: everything is forwarded again.
func (p *throttleProxy) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on = false
}

// counts reports the PutEvents requests seen while throttling and how many were answered.
func (p *throttleProxy) counts() (inWindow, throttled int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inWindow, p.throttled
}

func (p *throttleProxy) close() { _ = p.srv.Close() }

// stallProxy is a TCP proxy (raw bytes) the drill puts between the relays and the
// sandbox's Kinesis front. During a stall it moves no bytes either way and serves no new
// connection, as a network path that stopped answering; when the stall ends, every
// connection it held through it is reset, and new connections are served normally.
type stallProxy struct {
	Addr string // host:port the relays' aws.endpoints.kinesis points at

	ln       net.Listener
	upstream string

	mu       sync.Mutex
	pipes    map[*pipe]struct{} // open connections
	stalled  bool
	resume   chan struct{} // closed when the current stall ends
	heldOpen int           // connections open when a stall began (over every stall)
	heldNew  int           // connections accepted during a stall (over every stall)
	closed   bool
}

// pipe is one client connection and, once dialled, its upstream connection.
type pipe struct {
	client net.Conn

	mu     sync.Mutex
	up     net.Conn
	held   bool // open during a stall: reset when it ends (guarded by stallProxy.mu)
	closed bool
}

// errStalled is what a copy gets when the stall it waited through reset its connection.
var errStalled = errors.New("connection reset after a stall")

// startStallProxy listens on 127.0.0.1 (a free port) in front of upstream (host:port).
func startStallProxy(upstream string) (*stallProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &stallProxy{Addr: ln.Addr().String(), ln: ln, upstream: upstream, pipes: map[*pipe]struct{}{}}
	go p.accept()
	return p, nil
}

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		pp := &pipe{client: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.pipes[pp] = struct{}{}
		if p.stalled {
			// Accepted by the kernel, never served: it waits for the end of the stall.
			pp.held = true
			p.heldNew++
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		go p.serve(pp)
	}
}

// serve dials upstream and copies both ways until either side ends or a stall resets it.
func (p *stallProxy) serve(pp *pipe) {
	up, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
	if err != nil {
		p.drop(pp, false)
		return
	}
	pp.mu.Lock()
	if pp.closed { // a stall began and ended while dialling
		pp.mu.Unlock()
		up.Close()
		return
	}
	pp.up = up
	pp.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(gated{p, up}, pp.client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(gated{p, pp.client}, up); done <- struct{}{} }()
	<-done
	// A side that ends during a stall must not show either: the stall's end resets it.
	p.mu.Lock()
	stalled, resume := p.stalled && pp.held, p.resume
	p.mu.Unlock()
	if stalled {
		<-resume
	}
	p.drop(pp, false)
	<-done
}

// gated writes only while the proxy is not stalled; a write that meets a stall waits for
// its end and then fails, since the stall resets every connection it held.
type gated struct {
	p *stallProxy
	w io.Writer
}

func (g gated) Write(b []byte) (int, error) {
	g.p.mu.Lock()
	stalled, resume := g.p.stalled, g.p.resume
	g.p.mu.Unlock()
	if stalled {
		<-resume
		return 0, errStalled
	}
	return g.w.Write(b)
}

// begin stalls every open connection and every connection accepted until end.
func (p *stallProxy) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		return
	}
	p.stalled, p.resume = true, make(chan struct{})
	for pp := range p.pipes {
		pp.held = true
		p.heldOpen++
	}
}

// end resets every connection the stall held (RST, as a broken path would leave it)
// and serves new connections again.
func (p *stallProxy) end() {
	p.mu.Lock()
	if !p.stalled {
		p.mu.Unlock()
		return
	}
	p.stalled = false
	close(p.resume)
	var held []*pipe
	for pp := range p.pipes {
		if pp.held {
			held = append(held, pp)
		}
	}
	p.mu.Unlock()
	for _, pp := range held {
		p.drop(pp, true)
	}
}

// drop closes both sides of pp and forgets it; reset closes with RST instead of FIN.
func (p *stallProxy) drop(pp *pipe, reset bool) {
	p.mu.Lock()
	delete(p.pipes, pp)
	p.mu.Unlock()
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.closed {
		return
	}
	pp.closed = true
	for _, c := range []net.Conn{pp.client, pp.up} {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0)
		}
		c.Close()
	}
}

// counts reports the connections stalls held: open when one began, and accepted during one.
func (p *stallProxy) counts() (open, accepted int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.heldOpen, p.heldNew
}

// close stops accepting and closes every connection (ending a stall first).
func (p *stallProxy) close() {
	p.end()
	p.mu.Lock()
	p.closed = true
	all := make([]*pipe, 0, len(p.pipes))
	for pp := range p.pipes {
		all = append(all, pp)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, pp := range all {
		p.drop(pp, false)
	}
}

// String says what the stall proxy fronts, for the report.
func (p *stallProxy) String() string { return fmt.Sprintf("%s → %s", p.Addr, p.upstream) }
