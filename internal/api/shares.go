package api

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// requests counts the requests in progress per token and per account, against
// api.max_requests_per_token and _per_account. Keys are valid tokens' digests and
// configured accounts (counted after authentication), and a key leaves at zero, so the
// maps cannot grow with what a client sends.
type requests struct {
	mu         sync.Mutex
	perToken   map[[32]byte]int
	perAccount map[string]int
}

// retryRequest is the Retry-After of a request refused for its share: API requests
// end in milliseconds, so a place comes back soon.
const retryRequest = time.Second

// begin takes a place for a request of p, or answers why not; end gives it back.
func (s *Server) begin(p principal) (end func(), e *apiError) {
	q, h := &s.requests, s.httpLimits
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.perToken == nil {
		q.perToken, q.perAccount = map[[32]byte]int{}, map[string]int{}
	}
	switch {
	case q.perToken[p.digest] >= h.MaxRequestsPerToken:
		return nil, errExhausted(fmt.Sprintf("this token has %d requests in progress, its api.max_requests_per_token", h.MaxRequestsPerToken), retryRequest)
	case p.account != "" && q.perAccount[p.account] >= h.MaxRequestsPerAccount:
		return nil, errExhausted(fmt.Sprintf("this account's tokens have %d requests in progress, its api.max_requests_per_account", h.MaxRequestsPerAccount), retryRequest)
	}
	q.perToken[p.digest]++
	if p.account != "" {
		q.perAccount[p.account]++
	}
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		decrement(q.perToken, p.digest)
		if p.account != "" {
			decrement(q.perAccount, p.account)
		}
	}, nil
}

// isHealth names the routes every client, probe and Host gets an answer from.
func isHealth(r *http.Request) bool { return r.URL.Path == "/healthz" || r.URL.Path == "/readyz" }

// checkHost refuses, before any token is read, a request whose Host is not one of
// api.allowed_hosts (when set): a page that reaches the API by DNS rebinding names its
// own host, and reads nothing. The health routes answer whatever the Host. With
// anyIP, a Host that is an IP address is taken too: Prometheus scrapes each pod by its
// address, and a page can read an answer only through a name it controls (rebinding
// needs one), never through an address literal.
func (s *Server) checkHost(next http.Handler, anyIP bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isHealth(r) || anyIP && isIP(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		if !hostAllowed(s.limits.Load().AllowedHosts, r.Host) {
			// The Host is not echoed: it is whatever the client chose to send.
			writeError(w, errForbidden("this relay does not answer for the host this request names (api.allowed_hosts)"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed matches a Host header against the list, names case-insensitively; an
// entry without a port takes any port.
func hostAllowed(allowed []string, host string) bool {
	if len(allowed) == 0 {
		return true
	}
	name, port := splitHost(host)
	for _, a := range allowed {
		an, ap := splitHost(a)
		if strings.EqualFold(an, name) && (ap == "" || ap == port) {
			return true
		}
	}
	return false
}

// isIP reports whether a Host names an IP address (with or without a port).
func isIP(host string) bool {
	name, _ := splitHost(host)
	return net.ParseIP(name) != nil
}

// splitHost is a Host's name, without brackets or a final dot, and its port ("" when
// none).
func splitHost(h string) (name, port string) {
	name = h
	if n, p, err := net.SplitHostPort(h); err == nil {
		name, port = n, p
	}
	name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"), ".")
	return name, port
}
