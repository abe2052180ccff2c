package config

import (
	"crypto/subtle"
	"net"
	"net/url"
	"strings"
	"time"
)

// The checks of the operator API's keys: its listeners and hosts, its limits and each
// token's and account's share of them, and the console's sign-in.

func (p *parser) checkAPI(api *API, accountIDs map[string]bool) {
	if _, port, err := net.SplitHostPort(api.Listen); err != nil || !validPort(port) {
		p.add("api.listen", "%q must be host:port, like 127.0.0.1:8080 or :8080", api.Listen)
	}
	p.checkMetricsListen(api)
	for i, h := range api.AllowedHosts {
		if !validHost(h) {
			p.add(index("api.allowed_hosts", i), "%q must be a host name, or host:port, like relay.example.com or relay:8080", h)
		}
	}
	p.checkAPILimits(api)
	var tokens []string
	var tokenPaths []string
	for i, t := range api.Tokens {
		path := index("api.tokens", i)
		switch acct, isAccount := t.AccountID(); {
		case t.Scope == AdminScope:
		case t.Scope == "":
			p.add(path+".scope", "is required: admin, or account:<id> for one account")
		case isAccount && acct == "":
			p.add(path+".scope", "account: must name an account, like account:acct_123")
		case isAccount && !accountIDs[acct]:
			p.add(path+".scope", "account %s is not in accounts", acct)
		case !isAccount:
			p.add(path+".scope", "unknown scope %q: use admin, or account:<id> for one account", t.Scope)
		}
		if t.Token == "" {
			p.add(path+".token", "is required: the bearer token, like env:RELAY_ADMIN_TOKEN")
			continue
		}
		v, ok := p.secret(path+".token", t.Token)
		if !ok {
			api.Tokens[i].Token = ""
			continue
		}
		api.Tokens[i].Token = v
		for j, other := range tokens {
			if subtle.ConstantTimeCompare([]byte(v), []byte(other)) == 1 {
				p.add(path+".token", "is the same token as %s: each token must be different, so a scope can be told from its token", tokenPaths[j])
				break
			}
		}
		tokens = append(tokens, v)
		tokenPaths = append(tokenPaths, path)
	}
}

// checkMetricsListen: /metrics takes no token, so it needs its own address, never the
// API's (port 0, any free port, gives each its own).
func (p *parser) checkMetricsListen(api *API) {
	_, port, err := net.SplitHostPort(api.MetricsListen)
	switch {
	case api.MetricsListen == "":
		p.add("api.metrics_listen", "is required: the private host:port of /metrics, /healthz and /readyz, like %s", DefaultMetricsListen)
	case err != nil || !validPort(port):
		p.add("api.metrics_listen", "%q must be host:port, like %s or :9090", api.MetricsListen, DefaultMetricsListen)
	case port != "0" && sameAddress(api.MetricsListen, api.Listen):
		p.add("api.metrics_listen", "%q is api.listen's address: /metrics names every account and must not be on the API's listener", api.MetricsListen)
	}
}

// sameAddress reports whether two host:port addresses name one port on one interface
// (an empty host is every interface, so it overlaps any host on its port).
func sameAddress(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb {
		return false
	}
	return ha == "" || hb == "" || ha == "0.0.0.0" || hb == "0.0.0.0" || ha == "::" || hb == "::" || strings.EqualFold(ha, hb)
}

// validHost is a Host header value an operator may list: a name or an address, with an
// optional port, and nothing else (no scheme, path or space).
func validHost(h string) bool {
	host := h
	if hh, port, err := net.SplitHostPort(h); err == nil {
		if !validPort(port) || port == "0" {
			return false
		}
		host = hh
	}
	host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
	if host == "" {
		return false
	}
	if net.ParseIP(host) != nil {
		return true
	}
	for _, r := range host {
		if !(r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

func (p *parser) checkAPILimits(api *API) {
	h := api.HTTP
	if h.ReadTimeout < h.ReadHeaderTimeout {
		p.add("api.read_timeout", "%s is shorter than api.read_header_timeout (%s): it bounds the whole request, headers included", h.ReadTimeout, h.ReadHeaderTimeout)
	}
	if h.MaxBodyBytes < 1024 {
		p.add("api.max_body_bytes", "must be at least 1024 bytes (default %d)", DefaultAPI().HTTP.MaxBodyBytes)
	}
	if h.MaxConnections < minConnections {
		p.add("api.max_connections", "must be at least %d: the health checks, scrapers and every subscription each hold one", minConnections)
	}
	p.checkShares(api)
	if api.SubscriptionsPerToken < 1 {
		p.add("api.subscriptions_per_token", "must be at least 1")
	}
	if api.SubscriptionsPerAccount < api.SubscriptionsPerToken {
		p.add("api.subscriptions_per_account", "%d is fewer than api.subscriptions_per_token (%d)", api.SubscriptionsPerAccount, api.SubscriptionsPerToken)
	}
	if api.SubscriptionsPerAccount >= h.MaxConnections {
		p.add("api.subscriptions_per_account", "%d must be fewer than api.max_connections (%d): one account must not hold every connection", api.SubscriptionsPerAccount, h.MaxConnections)
	}
	for _, pair := range []struct {
		what          string
		dest, account string
		d, a          Rate
	}{
		{"test", "api.tests_per_destination", "api.tests_per_account", api.TestsPerDestination, api.TestsPerAccount},
		{"action", "api.actions_per_destination", "api.actions_per_account", api.ActionsPerDestination, api.ActionsPerAccount},
		{"replay", "api.replays_per_destination", "api.replays_per_account", api.ReplaysPerDestination, api.ReplaysPerAccount},
	} {
		p.checkRates(pair.dest, pair.d, pair.account, pair.a, 1, pair.what)
	}
	if api.DestinationsPerAccount < 1 {
		p.add("api.destinations_per_account", "must be at least 1: how many destinations one account may have")
	}
	if api.DestinationChangesPerAccount.Count < 1 {
		p.add("api.destination_changes_per_account.count", "must be at least 1 create, change or delete")
	}
	p.checkSignIn(api)
}

// The bounds of the sign-in keys: a link lives long enough to be opened, not long
// enough to sit in a mailbox; a session, long enough for a task, not a standing token.
const (
	minSignInLinkTTL = 10 * time.Second
	maxSignInLinkTTL = time.Hour
	minSessionTTL    = 5 * time.Minute
	maxSessionTTL    = 7 * 24 * time.Hour
)

// checkSignIn checks the console sign-in keys: the public URL links are made of, the
// lifetimes of a link and of a session, and the exchanges' rate.
func (p *parser) checkSignIn(api *API) {
	if api.PublicURL != "" {
		u, err := url.Parse(api.PublicURL)
		switch {
		case err != nil || u.User != nil:
			// Not quoted: a URL with a user may hold a password.
			p.add("api.public_url", "must be a plain http:// or https:// URL with no user, like https://relay.example.com")
		case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
			p.add("api.public_url", "%q must be an http:// or https:// URL, like https://relay.example.com (the console is at its /console/)", api.PublicURL)
		case u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(api.PublicURL, "?#"):
			p.add("api.public_url", "%q must hold no query or fragment: links add /console/#code=… to it", api.PublicURL)
		}
	}
	if api.SignInLinkTTL < minSignInLinkTTL || api.SignInLinkTTL > maxSignInLinkTTL {
		p.add("api.sign_in_link_ttl", "%s must be from %s to %s (default %s): how long a link's code may wait to be used", api.SignInLinkTTL, minSignInLinkTTL, maxSignInLinkTTL, DefaultAPI().SignInLinkTTL)
	}
	if api.SessionTTL < minSessionTTL || api.SessionTTL > maxSessionTTL {
		p.add("api.session_ttl", "%s must be from %s to %s (default %s): how long a console session lasts", api.SessionTTL, minSessionTTL, maxSessionTTL, DefaultAPI().SessionTTL)
	}
	if api.SignInsPerAccount.Count < 1 {
		p.add("api.sign_ins_per_account.count", "must be at least 1 sign-in")
	}
}

// checkShares checks what one token and one account may hold of the API: each below
// the whole, so another account and the probes always find room.
func (p *parser) checkShares(api *API) {
	h := api.HTTP
	if h.HealthConnections < 1 || h.HealthConnections > h.MaxConnections/4 {
		p.add("api.health_connections", "%d must be from 1 to a quarter of api.max_connections (%d): the places kept for the probes", h.HealthConnections, h.MaxConnections)
	}
	if h.MaxConnectionsPerToken < 1 {
		p.add("api.max_connections_per_token", "must be at least 1")
	}
	if h.MaxConnectionsPerAccount < h.MaxConnectionsPerToken {
		p.add("api.max_connections_per_account", "%d is fewer than api.max_connections_per_token (%d)", h.MaxConnectionsPerAccount, h.MaxConnectionsPerToken)
	}
	if h.MaxConnectionsPerAccount >= h.MaxConnections-h.HealthConnections {
		p.add("api.max_connections_per_account", "%d must be fewer than api.max_connections less api.health_connections (%d): one account must not hold every connection", h.MaxConnectionsPerAccount, h.MaxConnections-h.HealthConnections)
	}
	if h.MaxRequestsPerToken < 1 {
		p.add("api.max_requests_per_token", "must be at least 1")
	}
	if h.MaxRequestsPerAccount < h.MaxRequestsPerToken {
		p.add("api.max_requests_per_account", "%d is fewer than api.max_requests_per_token (%d)", h.MaxRequestsPerAccount, h.MaxRequestsPerToken)
	}
	// A live subscription holds a connection: a subscription cap above the connection
	// cap would never be reached.
	if api.SubscriptionsPerToken > h.MaxConnectionsPerToken {
		p.add("api.subscriptions_per_token", "%d is more than api.max_connections_per_token (%d): each subscription holds a connection", api.SubscriptionsPerToken, h.MaxConnectionsPerToken)
	}
	if api.SubscriptionsPerAccount > h.MaxConnectionsPerAccount {
		p.add("api.subscriptions_per_account", "%d is more than api.max_connections_per_account (%d): each subscription holds a connection", api.SubscriptionsPerAccount, h.MaxConnectionsPerAccount)
	}
}

// minConnections is the least api.max_connections: room for probes, scrapers and a few
// subscriptions.
const minConnections = 16
