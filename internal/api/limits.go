package api

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mercamap/relay/internal/config"
)

// HTTPServer is the http.Server for the API with the limits of the config it was made
// with: headers and bodies are read within their timeouts, idle keep-alives end, and
// every connection is known to the listener Listener returns (serve both together).
// There is no WriteTimeout: it would cut every SSE stream, and each stream bounds its
// own writes.
func (s *Server) HTTPServer(errorLog *log.Logger) *http.Server {
	hs := s.httpServer(s.Handler(), errorLog)
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if tc, ok := c.(*trackedConn); ok {
			return context.WithValue(ctx, connKey{}, tc)
		}
		return ctx
	}
	// Which connections are between requests: the ones to cut first from a holder.
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		if tc, ok := c.(*trackedConn); ok {
			tc.idle.Store(st == http.StateIdle)
		}
	}
	return hs
}

// MetricsHTTPServer serves MetricsHandler with the API's timeouts, for the operator
// listener (api.metrics_listen).
func (s *Server) MetricsHTTPServer(errorLog *log.Logger) *http.Server {
	return s.httpServer(s.MetricsHandler(), errorLog)
}

func (s *Server) httpServer(h http.Handler, errorLog *log.Logger) *http.Server {
	l := s.httpLimits
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		// ReadTimeout bounds the request with its body, and the unread rest of a body the
		// server drains after an answer: a client that declares a body and never sends it
		// is cut then. It does not bound the answer: net/http lifts the deadline once the
		// body is read, so a subscription or a test send runs as long as it needs.
		ReadTimeout: l.ReadTimeout,
		IdleTimeout: l.IdleTimeout,
		ErrorLog:    errorLog,
	}
}

// Listener caps the connections open through ln at the config's max_connections, and
// keeps each token's and account's share of them (api.max_connections_per_token,
// _per_account): a connection counts for the token that last authenticated on it, and
// authenticated connections never take the last health_connections places. Past the
// cap, a new connection closes the oldest one that has not authenticated yet, so
// thousands of connections without a token cannot keep /healthz, /readyz or a customer
// out; when the authenticated ones fill their part, a newcomer of another account
// closes one of the largest holder's (an idle one first), not the other way round.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &connLimiter{Listener: ln, h: s.httpLimits, shed: s.shed,
		perToken: map[[32]byte]int{}, perAccount: map[string]int{}, groups: map[string]*list.List{}}
}

type connKey struct{}

// owner is whom an authenticated connection counts for.
type owner struct {
	token   [32]byte // sha256 of the token
	account string   // "" for an admin token
}

// group is the holder a full pool takes a connection from: the account, or an admin
// token on its own.
func (o owner) group() string {
	if o.account != "" {
		return "account:" + o.account
	}
	return "token:" + string(o.token[:])
}

// connLimiter is the capped listener.
type connLimiter struct {
	net.Listener
	h    config.HTTPLimits
	shed func() // counts a connection closed to make room

	mu         sync.Mutex
	open       int
	waiting    list.List // *trackedConn not authenticated, oldest first
	attributed int       // connections counted for a token
	perToken   map[[32]byte]int
	perAccount map[string]int
	groups     map[string]*list.List // authenticated *trackedConn by owner.group(), oldest first
}

// trackedConn is one accepted connection.
type trackedConn struct {
	net.Conn
	l      *connLimiter
	elem   *list.Element // in l.waiting, or in its owner's group once authenticated
	owner  *owner        // nil until a request on it authenticates
	idle   atomic.Bool   // between requests
	gone   bool          // closed: a request still in hand on it is counted for no one
	closed sync.Once
}

// Accept returns the next connection, making room for it past the cap.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		var victim *trackedConn
		if l.open >= l.h.MaxConnections {
			if e := l.waiting.Front(); e != nil {
				victim = e.Value.(*trackedConn)
			} else {
				victim = l.largestLocked("") // health_connections < 1 only: a hand-made config
			}
			if victim == nil {
				l.mu.Unlock()
				_ = c.Close()
				l.shed()
				continue
			}
			l.detachLocked(victim)
		}
		tc := &trackedConn{Conn: c, l: l}
		tc.elem = l.waiting.PushBack(tc)
		l.open++
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Close()
			l.shed()
		}
		return tc, nil
	}
}

// Close closes the connection once, giving its place back.
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.closed.Do(func() {
		c.l.mu.Lock()
		defer c.l.mu.Unlock()
		c.l.open--
		c.l.detachLocked(c)
		c.gone = true
	})
	return err
}

// detachLocked takes c out of the list it is in and out of its owner's counts.
func (l *connLimiter) detachLocked(c *trackedConn) {
	if c.owner != nil {
		g := c.owner.group()
		if c.elem != nil {
			l.groups[g].Remove(c.elem)
		}
		if l.groups[g].Len() == 0 {
			delete(l.groups, g)
		}
		decrement(l.perToken, c.owner.token)
		if c.owner.account != "" {
			decrement(l.perAccount, c.owner.account)
		}
		l.attributed--
		c.owner = nil
	} else if c.elem != nil {
		l.waiting.Remove(c.elem)
	}
	c.elem = nil
}

// decrement lowers m[k], dropping it at zero: the maps hold only current holders.
func decrement[K comparable](m map[K]int, k K) {
	if m[k] <= 1 {
		delete(m, k)
	} else {
		m[k]--
	}
}

// largestLocked picks the connection to close of the group holding the most, its
// oldest idle one first; nil when that group holds no more than one over own's (so
// the newcomer of own is the one refused).
func (l *connLimiter) largestLocked(own string) *trackedConn {
	var largest *list.List
	for _, g := range l.groups {
		if largest == nil || g.Len() > largest.Len() {
			largest = g
		}
	}
	ownLen := 0
	if g := l.groups[own]; g != nil {
		ownLen = g.Len()
	}
	if largest == nil || largest.Len() <= ownLen+1 {
		return nil
	}
	for e := largest.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*trackedConn); c.idle.Load() {
			return c
		}
	}
	return largest.Front().Value.(*trackedConn)
}

// claim counts the connection of r for o (a request on it authenticated as o). Past
// o's share, or with every authenticated place taken by o's group, the answer is 429
// and the connection is closed after it; with the places taken by a larger holder, one
// of the holder's is closed instead.
func (s *Server) claim(w http.ResponseWriter, r *http.Request, p principal) *apiError {
	c, ok := r.Context().Value(connKey{}).(*trackedConn)
	if !ok {
		return nil // not served through Listener
	}
	e := c.l.claim(c, owner{token: p.digest, account: p.account})
	if e != nil {
		w.Header().Set("Connection", "close")
	}
	return e
}

func (l *connLimiter) claim(c *trackedConn, o owner) *apiError {
	l.mu.Lock()
	if c.gone || c.owner != nil && *c.owner == o {
		l.mu.Unlock()
		return nil
	}
	// A keep-alive connection that now carries another token counts for that one.
	l.detachLocked(c)
	var victim *trackedConn
	var e *apiError
	switch h := l.h; {
	case l.perToken[o.token] >= h.MaxConnectionsPerToken:
		e = errExhausted(fmt.Sprintf("this token holds %d open connections, its api.max_connections_per_token: reuse them", h.MaxConnectionsPerToken), retryConnection)
	case o.account != "" && l.perAccount[o.account] >= h.MaxConnectionsPerAccount:
		e = errExhausted(fmt.Sprintf("this account's tokens hold %d open connections, its api.max_connections_per_account: reuse them", h.MaxConnectionsPerAccount), retryConnection)
	case l.attributed >= h.MaxConnections-h.HealthConnections:
		if victim = l.largestLocked(o.group()); victim == nil {
			e = errExhausted("the relay's connections are all in use: reuse an open one", retryConnection)
		} else {
			l.detachLocked(victim) // closed below; Close gives its place back
		}
	}
	if e != nil {
		c.elem = l.waiting.PushBack(c)
		l.mu.Unlock()
		return e
	}
	c.owner = &o
	g := l.groups[o.group()]
	if g == nil {
		g = list.New()
		l.groups[o.group()] = g
	}
	c.elem = g.PushBack(c)
	l.perToken[o.token]++
	if o.account != "" {
		l.perAccount[o.account]++
	}
	l.attributed++
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Close()
		l.shed()
	}
	return nil
}

// retryConnection is the Retry-After of a connection refused for a share: a place
// comes back when the client closes one of its own.
const retryConnection = time.Second

// limitRequests bounds every request body at max_body_bytes.
func (s *Server) limitRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, s.httpLimits.MaxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// readBody reads a request body whole, within max_body_bytes.
func readBody(r *http.Request) ([]byte, *apiError) {
	b, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, errInvalid("the body is larger than " + strconv.FormatInt(tooLarge.Limit, 10) + " bytes")
	case err != nil:
		return nil, errInvalid("cannot read the body")
	}
	return b, nil
}

// httpLimitsOf fills what a config left at zero (a test's hand-made config) with the
// defaults.
func httpLimitsOf(cfg *config.Config) config.HTTPLimits {
	h, def := config.HTTPLimits{}, config.DefaultAPI().HTTP
	if cfg != nil {
		h = cfg.API.HTTP
	}
	if h.ReadHeaderTimeout <= 0 {
		h.ReadHeaderTimeout = def.ReadHeaderTimeout
	}
	if h.ReadTimeout <= 0 {
		h.ReadTimeout = def.ReadTimeout
	}
	if h.IdleTimeout <= 0 {
		h.IdleTimeout = def.IdleTimeout
	}
	if h.MaxBodyBytes <= 0 {
		h.MaxBodyBytes = def.MaxBodyBytes
	}
	if h.MaxConnections <= 0 {
		h.MaxConnections = def.MaxConnections
	}
	// The shares of a hand-made config follow its pool as the defaults follow theirs.
	share := func(n *int, d int) {
		if *n <= 0 {
			*n = max(1, d*h.MaxConnections/def.MaxConnections)
		}
	}
	share(&h.HealthConnections, def.HealthConnections)
	share(&h.MaxConnectionsPerToken, def.MaxConnectionsPerToken)
	share(&h.MaxConnectionsPerAccount, def.MaxConnectionsPerAccount)
	if h.MaxRequestsPerToken <= 0 {
		h.MaxRequestsPerToken = def.MaxRequestsPerToken
	}
	if h.MaxRequestsPerAccount <= 0 {
		h.MaxRequestsPerAccount = def.MaxRequestsPerAccount
	}
	return h
}
