package api

import (
	"container/list"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/mercamap/relay/internal/config"
)

// HTTPServer is the http.Server for the API with the limits of the config it was made
// with: headers and bodies are read within their timeouts, idle keep-alives end, and
// every connection is known to the listener Listener returns (serve both together).
// There is no WriteTimeout: it would cut every SSE stream, and each stream bounds its
// own writes.
func (s *Server) HTTPServer(errorLog *log.Logger) *http.Server {
	h := s.httpLimits
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: h.ReadHeaderTimeout,
		// ReadTimeout bounds the request with its body, and the unread rest of a body the
		// server drains after an answer: a client that declares a body and never sends it
		// is cut then. It does not bound the answer: net/http lifts the deadline once the
		// body is read, so a subscription or a test send runs as long as it needs.
		ReadTimeout: h.ReadTimeout,
		IdleTimeout: h.IdleTimeout,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*trackedConn); ok {
				return context.WithValue(ctx, connKey{}, tc)
			}
			return ctx
		},
		ErrorLog: errorLog,
	}
}

// Listener caps the connections open through ln at the config's max_connections. Past
// the cap, a new connection closes the oldest one that has not authenticated yet, so
// thousands of slow connections without a token cannot keep /healthz, /readyz or
// /metrics (nor a customer with a token) out; when every open connection has
// authenticated, the new one is closed instead.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &connLimiter{Listener: ln, max: s.httpLimits.MaxConnections, shed: s.shed}
}

type connKey struct{}

// connLimiter is the capped listener.
type connLimiter struct {
	net.Listener
	max  int
	shed func() // counts a connection closed to make room

	mu      sync.Mutex
	open    int
	waiting list.List // *trackedConn not authenticated yet, oldest first
}

// trackedConn is one accepted connection.
type trackedConn struct {
	net.Conn
	l      *connLimiter
	elem   *list.Element // in l.waiting until a request on it authenticates
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
		if l.open >= l.max {
			e := l.waiting.Front()
			if e == nil {
				l.mu.Unlock()
				_ = c.Close() // every open connection authenticated: refuse this one
				l.shed()
				continue
			}
			victim = e.Value.(*trackedConn)
			l.waiting.Remove(e)
			victim.elem = nil
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
		if c.elem != nil {
			c.l.waiting.Remove(c.elem)
			c.elem = nil
		}
	})
	return err
}

// authenticated keeps the connection of r from being closed to make room: a request on
// it carried a valid token.
func authenticated(r *http.Request) {
	c, ok := r.Context().Value(connKey{}).(*trackedConn)
	if !ok {
		return
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.elem != nil {
		c.l.waiting.Remove(c.elem)
		c.elem = nil
	}
}

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
	return h
}
