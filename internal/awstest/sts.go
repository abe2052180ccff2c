package awstest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/ratelimit"
)

// STS answers AssumeRole over the Query wire format, enforcing each registered role's
// trust policy the way real STS does (StringEquals and StringLike, negated or IfExists,
// on sts:ExternalId and sts:RoleSessionName): one AccessDenied for no trust, a wrong
// ExternalId and a missing one. Every caller is CallerARN. Unregistered roles trust nobody.
// It counts every call (by role, by caller) and can throttle each caller past a rate.
type STS struct {
	URL string

	mu       sync.Mutex
	roles    map[string]trustPolicy
	requests []AssumeRoleRequest
	issued   map[string]AssumeRoleRequest // session access key id → the request that got it
	forget   bool                         // keep neither (ForgetRequests)
	fail     queue[Failure]
	perms    map[string]string // role → its permissions policy, when the test set one
	// throttle, when set, is the AssumeRole rate each caller may make: past it, STS
	// answers Throttling as AWS does, per calling principal.
	throttle *config.Rate
	callers  ratelimit.Buckets
}

// AssumeRoleRequest is one AssumeRole call as STS received it.
type AssumeRoleRequest struct {
	RoleARN, RoleSessionName, ExternalID, Policy string
	DurationSeconds                              int
	CallerKeyID                                  string // the key that signed the call: our own identity
	Granted                                      bool
	Throttled                                    bool   // answered Throttling: the caller was over ThrottleAbove
	AccessKeyID                                  string // of the session handed out, when Granted
	Expiration                                   time.Time
}

// NewSTS starts an STS on 127.0.0.1, closed when the test ends.
func NewSTS(t testing.TB) *STS {
	s := NewSTSHandler()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// NewSTSHandler returns an STS to serve on a listener of the caller's (the sandbox).
func NewSTSHandler() *STS {
	return &STS{roles: map[string]trustPolicy{}, issued: map[string]AssumeRoleRequest{}, perms: map[string]string{}}
}

// ForgetRequests makes STS answer as before but keep neither its calls nor the sessions
// it hands out from then on: Requests, Calls and CallsBy see none of its later calls,
// and a bus that requires sessions from it refuses every write they would sign. For a
// server that lives through millions of calls, as the bench's does, in the process
// whose CPU it measures.
func (s *STS) ForgetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget = true
}

// ServeHTTP answers one STS Query request.
func (s *STS) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serve(w, r) }

// RequireExternalID registers a role whose trust policy lets CallerARN in with exactly
// externalID (StringEquals sts:ExternalId), as the card's trust policy does.
func (s *STS) RequireExternalID(roleARN, externalID string) {
	s.mustSet(roleARN, externalIDPolicy(externalID))
}

// RequireExternalIDOf registers a role whose trust policy requires, at each call, the
// ExternalId lookup returns: for a destination the relay issues its id while the test
// runs (lookup reads it from Redis), so its first session is already trusted.
func (s *STS) RequireExternalIDOf(roleARN string, lookup func() string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roles[roleARN] = trustPolicy{lookup: lookup}
}

// externalIDPolicy is the card's trust policy: CallerARN, with exactly externalID.
func externalIDPolicy(externalID string) string {
	cond, _ := json.Marshal(map[string]any{"StringEquals": map[string]string{"sts:ExternalId": externalID}})
	return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"` + CallerARN +
		`"},"Action":"sts:AssumeRole","Condition":` + string(cond) + `}]}`
}

// AllowAny registers a role that lets CallerARN in with any ExternalId, or none:
// the misconfiguration the probe exists to catch.
func (s *STS) AllowAny(roleARN string) {
	s.mustSet(roleARN, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"`+CallerARN+
		`"},"Action":"sts:AssumeRole"}]}`)
}

// TrustNobody registers a role whose trust policy does not name our principal.
func (s *STS) TrustNobody(roleARN string) {
	s.mustSet(roleARN, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::000000000000:root"},"Action":"sts:AssumeRole"}]}`)
}

// SetTrustPolicy registers a role with a trust policy document as a customer would write
// it. It refuses a policy it cannot evaluate as AWS would (NotPrincipal, NotAction, other
// condition operators or keys) instead of guessing.
func (s *STS) SetTrustPolicy(roleARN, policy string) error {
	p, err := parseTrustPolicy(policy)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roles[roleARN] = p
	return nil
}

func (s *STS) mustSet(roleARN, policy string) {
	p := mustParse(policy)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roles[roleARN] = p
}

// mustParse parses one of the built-in trust policies above.
func mustParse(policy string) trustPolicy {
	p, err := parseTrustPolicy(policy)
	if err != nil {
		panic("awstest: a built-in trust policy does not parse: " + err.Error())
	}
	return p
}

// SetPermissionsPolicy gives a role a permissions policy: a session of it may do only
// what both this and its session policy allow (AccessDeniedException otherwise). A role
// without one is not modelled: its session policy alone decides.
func (s *STS) SetPermissionsPolicy(roleARN, policy string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.perms[roleARN] = policy
}

// ThrottleAbove makes STS throttle each calling principal (the key that signs) past
// count calls per per, refilling evenly: the call is answered HTTP 400 Throttling "Rate
// exceeded", the shape real STS answers when one principal's AssumeRole rate is spent.
func (s *STS) ThrottleAbove(count int, per time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle = &config.Rate{Count: count, Per: per}
}

// Calls counts the AssumeRole calls received so far by role, throttled ones included.
func (s *STS) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[string]int{}
	for _, r := range s.requests {
		n[r.RoleARN]++
	}
	return n
}

// CallsBy counts the AssumeRole calls received so far by calling key, and how many of
// them were throttled.
func (s *STS) CallsBy() (calls, throttled map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls, throttled = map[string]int{}, map[string]int{}
	for _, r := range s.requests {
		calls[r.CallerKeyID]++
		if r.Throttled {
			throttled[r.CallerKeyID]++
		}
	}
	return calls, throttled
}

// FailNext answers the next n calls with f instead of looking at them. A zero Failure
// answers normally, so FailNext(1, Failure{}) then FailNext(1, f) fails the second call.
func (s *STS) FailNext(n int, f Failure) { s.fail.push(n, f) }

// Requests returns every AssumeRole call received so far, in order.
func (s *STS) Requests() []AssumeRoleRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]AssumeRoleRequest(nil), s.requests...)
}

// Session returns the AssumeRole call that handed out accessKeyID.
func (s *STS) Session(accessKeyID string) (AssumeRoleRequest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.issued[accessKeyID]
	return r, ok
}

// STS's documented limits on the parameters the relay sends.
var (
	sessionNameRe = regexp.MustCompile(`^[\w+=,.@-]{2,64}$`)
	externalIDRe  = regexp.MustCompile(`^[\w+=,.@:/-]+$`) // and 2 to 1224 characters
)

func (s *STS) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
		writeQueryError(w, Failure{400, "InvalidAction", "expected a POSTed form"})
		return
	}
	if a := r.PostForm.Get("Action"); a != "AssumeRole" || r.PostForm.Get("Version") != "2011-06-15" {
		writeQueryError(w, Failure{400, "InvalidAction", "Could not find operation " + a + " for version " + r.PostForm.Get("Version")})
		return
	}
	_, hasExternalID := r.PostForm["ExternalId"]
	req := AssumeRoleRequest{
		RoleARN:         r.PostForm.Get("RoleArn"),
		RoleSessionName: r.PostForm.Get("RoleSessionName"),
		ExternalID:      r.PostForm.Get("ExternalId"),
		Policy:          r.PostForm.Get("Policy"),
		CallerKeyID:     accessKeyID(r),
	}
	req.DurationSeconds, _ = strconv.Atoi(r.PostForm.Get("DurationSeconds"))
	if req.DurationSeconds == 0 {
		req.DurationSeconds = 3600 // STS's default
	}
	s.mu.Lock()
	rate := s.throttle
	s.mu.Unlock()
	if rate != nil {
		if ok, _ := s.callers.Take(time.Now(), ratelimit.Limit{Key: req.CallerKeyID, Rate: *rate}); !ok {
			req.Throttled = true
			s.record(req)
			writeQueryError(w, STSThrottling)
			return
		}
	}
	if f, ok := s.fail.pop(); ok && f.Status != 0 {
		s.record(req)
		writeQueryError(w, f)
		return
	}
	if req.CallerKeyID == "" {
		s.record(req)
		writeQueryError(w, Failure{403, "MissingAuthenticationToken", "Request is missing Authentication Token"})
		return
	}
	if msg := validate(req, hasExternalID); msg != "" {
		s.record(req)
		writeQueryError(w, Failure{400, "ValidationError", msg})
		return
	}
	if req.Policy != "" && !json.Valid([]byte(req.Policy)) {
		s.record(req)
		writeQueryError(w, Failure{400, "MalformedPolicyDocument", "The policy is not in the valid JSON format."})
		return
	}

	s.mu.Lock()
	tr := s.roles[req.RoleARN]
	s.mu.Unlock()
	if tr.lookup != nil {
		tr = mustParse(externalIDPolicy(tr.lookup()))
	}
	conditionContext := map[string]string{"sts:rolesessionname": req.RoleSessionName}
	if hasExternalID {
		conditionContext["sts:externalid"] = req.ExternalID
	}
	if !tr.allows(conditionContext) {
		s.record(req)
		writeQueryError(w, Failure{403, "AccessDenied",
			"User: " + CallerARN + " is not authorized to perform: sts:AssumeRole on resource: " + req.RoleARN})
		return
	}

	req.Granted = true
	req.AccessKeyID = "ASIA" + strings.ToUpper(RandomHex(8))
	req.Expiration = time.Now().UTC().Add(time.Duration(req.DurationSeconds) * time.Second).Truncate(time.Millisecond)
	s.record(req)
	roleName := req.RoleARN[strings.LastIndex(req.RoleARN, "/")+1:]
	account := strings.Split(req.RoleARN+":::::", ":")[4]
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleResult>
    <Credentials>
      <AccessKeyId>%s</AccessKeyId>
      <SecretAccessKey>%s</SecretAccessKey>
      <SessionToken>%s</SessionToken>
      <Expiration>%s</Expiration>
    </Credentials>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::%s:assumed-role/%s/%s</Arn>
      <AssumedRoleId>AROA%s:%s</AssumedRoleId>
    </AssumedRoleUser>
    <PackedPolicySize>6</PackedPolicySize>
  </AssumeRoleResult>
  <ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata>
</AssumeRoleResponse>`,
		req.AccessKeyID, RandomHex(20), RandomHex(32), req.Expiration.Format("2006-01-02T15:04:05.000Z"),
		XMLEscape(account), XMLEscape(roleName), XMLEscape(req.RoleSessionName),
		strings.ToUpper(RandomHex(8)), XMLEscape(req.RoleSessionName), RandomHex(16))
}

// validate applies STS's parameter limits; "" when the request is well formed.
func validate(req AssumeRoleRequest, hasExternalID bool) string {
	switch {
	case req.RoleARN == "":
		return "1 validation error detected: Value null at 'roleArn' failed to satisfy constraint: Member must not be null"
	case !sessionNameRe.MatchString(req.RoleSessionName):
		return "1 validation error detected: Value at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]*, length 2-64"
	case hasExternalID && (len(req.ExternalID) < 2 || len(req.ExternalID) > 1224 || !externalIDRe.MatchString(req.ExternalID)):
		return "1 validation error detected: Value at 'externalId' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@:\\/-]*, length 2-1224"
	case req.DurationSeconds < 900 || req.DurationSeconds > 43200:
		return "1 validation error detected: Value at 'durationSeconds' failed to satisfy constraint: Member must have value between 900 and 43200"
	case len(req.Policy) > 2048:
		return "1 validation error detected: Value at 'policy' failed to satisfy constraint: Member must have length less than or equal to 2048"
	}
	return ""
}

func (s *STS) record(req AssumeRoleRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forget {
		return
	}
	s.requests = append(s.requests, req)
	if req.Granted {
		s.issued[req.AccessKeyID] = req
	}
}

// writeQueryError answers in the Query protocol's XML error shape.
func writeQueryError(w http.ResponseWriter, f Failure) {
	kind := "Sender"
	if f.Status >= 500 {
		kind = "Receiver"
	}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(f.Status)
	fmt.Fprintf(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error>
    <Type>%s</Type>
    <Code>%s</Code>
    <Message>%s</Message>
  </Error>
  <RequestId>%s</RequestId>
</ErrorResponse>`, kind, XMLEscape(f.Code), XMLEscape(f.Message), RandomHex(16))
}

// XMLEscape is s as XML text, for the answers written by hand in AWS's XML shapes.
func XMLEscape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// RandomHex is n random bytes in hex: request ids, keys, session tokens.
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Authorize is authorize for a bus of the caller's own (the sandbox's Kinesis front):
// the failure AWS would answer, and false, unless r is signed with a live session this
// STS handed out that both its session policy and its role's permissions policy (when
// SetPermissionsPolicy gave it one) allow action on resource.
func (s *STS) Authorize(r *http.Request, action, resource string) (Failure, bool) {
	return s.authorize(r, action, resource)
}

// authorize checks that r is signed with a live session this STS handed out, whose
// session policy allows action on resource. It returns the error AWS would answer
// otherwise; the role's own permissions count once SetPermissionsPolicy gave it some.
func (s *STS) authorize(r *http.Request, action, resource string) (Failure, bool) {
	sess, ok := s.Session(accessKeyID(r))
	s.mu.Lock()
	perms, permsSet := s.perms[sess.RoleARN]
	s.mu.Unlock()
	switch {
	case !ok || r.Header.Get("X-Amz-Security-Token") == "":
		return Failure{400, "UnrecognizedClientException", "The security token included in the request is invalid."}, false
	case time.Now().After(sess.Expiration):
		return Failure{400, "ExpiredTokenException", "The security token included in the request is expired"}, false
	case sess.Policy != "" && !policyAllows(sess.Policy, action, resource):
		return Failure{400, "AccessDeniedException", fmt.Sprintf(
			"User: arn:aws:sts::%s:assumed-role/%s is not authorized to perform: %s on resource: %s because no session policy allows the %s action",
			strings.Split(sess.RoleARN+":::::", ":")[4], sess.RoleSessionName, action, resource, action)}, false
	case permsSet && !policyAllows(perms, action, resource):
		return Failure{400, "AccessDeniedException", fmt.Sprintf(
			"User: arn:aws:sts::%s:assumed-role/%s is not authorized to perform: %s on resource: %s because no identity-based policy allows the %s action",
			strings.Split(sess.RoleARN+":::::", ":")[4], sess.RoleSessionName, action, resource, action)}, false
	}
	return Failure{}, true
}

// policyAllows evaluates an IAM policy for one action on one resource: some Allow
// statement matches and no Deny does. Only "*" and exact values match.
func policyAllows(policy, action, resource string) bool {
	var doc struct {
		Statement []struct {
			Effect           string
			Action, Resource any // a string or a list of strings
		}
	}
	if json.Unmarshal([]byte(policy), &doc) != nil {
		return false
	}
	matches := func(v any, want string) bool {
		list, ok := v.([]any)
		if !ok {
			list = []any{v}
		}
		for _, x := range list {
			if x == "*" || x == want {
				return true
			}
		}
		return false
	}
	allowed := false
	for _, st := range doc.Statement {
		if matches(st.Action, action) && matches(st.Resource, resource) {
			if st.Effect == "Deny" {
				return false
			}
			allowed = allowed || st.Effect == "Allow"
		}
	}
	return allowed
}
