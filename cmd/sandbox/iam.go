package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/awstest"
)

// The customer's IAM, as much of it as the card's AWS CLI commands need, on the IAM
// Query API the AWS CLI speaks (POST form Action=…&Version=2010-05-08, XML answers):
//
//	CreateRole              RoleName, AssumeRolePolicyDocument[, Path, Description, MaxSessionDuration]
//	UpdateAssumeRolePolicy  RoleName, PolicyDocument
//	PutRolePolicy           RoleName, PolicyName, PolicyDocument
//	GetRole, GetRolePolicy, DeleteRolePolicy
//
// and it enforces what they say: the sandbox's STS lets a caller assume the role only as
// its trust policy allows (our principal, the sts:ExternalId condition), and a session of
// the role may write only what its inline policies allow (events:PutEvents on that bus,
// kinesis:PutRecord on that stream): a role made here may write nothing until
// PutRolePolicy gives it a policy. Roles are made in --iam-account. A request must be
// signed (SigV4, any key: the sandbox checks no signature). POST /trust of the admin API
// still sets a role's trust directly, without IAM.

const iamVersion = "2010-05-08"

var (
	iamNameRe   = regexp.MustCompile(`^[\w+=,.@-]{1,64}$`)
	iamPolicyRe = regexp.MustCompile(`^[\w+=,.@-]{1,128}$`)
	iamPathRe   = regexp.MustCompile(`^/([\x21-\x7E]{0,510}/)?$`)
)

// iamService is the sandbox's IAM: roles by name, each in sts.
type iamService struct {
	account string
	sts     *awstest.STS
	out     *lockedWriter

	mu    sync.Mutex
	roles map[string]*iamRole
}

type iamRole struct {
	name, path, arn, id, description string
	trust                            string // the AssumeRolePolicyDocument as sent
	maxSession                       int
	created                          time.Time
	policies                         map[string]string // inline policies by name, as sent
}

func newIAM(account string, sts *awstest.STS, out *lockedWriter) *iamService {
	return &iamService{account: account, sts: sts, out: out, roles: map[string]*iamRole{}}
}

// iamError is an answer in IAM's error shape.
type iamError struct {
	status        int
	code, message string
}

func noSuchRole(name string) *iamError {
	return &iamError{http.StatusNotFound, "NoSuchEntity", "The role with name " + name + " cannot be found."}
}

func validationError(field, value, constraint string) *iamError {
	return &iamError{http.StatusBadRequest, "ValidationError",
		fmt.Sprintf("1 validation error detected: Value '%s' at '%s' failed to satisfy constraint: %s", value, field, constraint)}
}

func malformed(msg string) *iamError {
	return &iamError{http.StatusBadRequest, "MalformedPolicyDocument", msg}
}

func (s *iamService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
		writeIAMError(w, &iamError{http.StatusBadRequest, "InvalidAction", "expected a POSTed form"})
		return
	}
	f := r.PostForm
	action := f.Get("Action")
	if f.Get("Version") != iamVersion {
		writeIAMError(w, &iamError{http.StatusBadRequest, "InvalidAction", "Could not find operation " + action + " for version " + f.Get("Version")})
		return
	}
	if !strings.Contains(r.Header.Get("Authorization"), "Credential=") {
		writeIAMError(w, &iamError{http.StatusForbidden, "MissingAuthenticationToken", "Request is missing Authentication Token"})
		return
	}
	var result string // the <…Result> element's content; "" for actions that answer none
	var e *iamError
	switch action {
	case "CreateRole":
		result, e = s.createRole(f)
	case "GetRole":
		result, e = s.getRole(f)
	case "UpdateAssumeRolePolicy":
		e = s.updateTrust(f)
	case "PutRolePolicy":
		e = s.putRolePolicy(f)
	case "GetRolePolicy":
		result, e = s.getRolePolicy(f)
	case "DeleteRolePolicy":
		e = s.deleteRolePolicy(f)
	default:
		e = &iamError{http.StatusBadRequest, "InvalidAction", "Could not find operation " + action + " for version " + iamVersion +
			" (the sandbox's IAM serves CreateRole, GetRole, UpdateAssumeRolePolicy, PutRolePolicy, GetRolePolicy, DeleteRolePolicy)"}
	}
	if e != nil {
		writeIAMError(w, e)
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<%sResponse xmlns="https://iam.amazonaws.com/doc/%s/">`+"\n", action, iamVersion)
	if result != "" {
		fmt.Fprintf(w, "  <%sResult>\n%s  </%sResult>\n", action, result, action)
	}
	fmt.Fprintf(w, "  <ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata>\n</%sResponse>\n", requestID(), action)
}

// role returns the role f's RoleName names.
func (s *iamService) role(f url.Values) (*iamRole, *iamError) {
	name := f.Get("RoleName")
	if !iamNameRe.MatchString(name) {
		return nil, validationError("roleName", name, "Member must satisfy regular expression pattern: [\\w+=,.@-]+, length 1-64")
	}
	r, ok := s.roles[name]
	if !ok {
		return nil, noSuchRole(name)
	}
	return r, nil
}

func (s *iamService) createRole(f url.Values) (string, *iamError) {
	name, path, trust := f.Get("RoleName"), f.Get("Path"), f.Get("AssumeRolePolicyDocument")
	if path == "" {
		path = "/"
	}
	switch {
	case !iamNameRe.MatchString(name):
		return "", validationError("roleName", name, "Member must satisfy regular expression pattern: [\\w+=,.@-]+, length 1-64")
	case !iamPathRe.MatchString(path):
		return "", validationError("path", path, "Member must satisfy regular expression pattern: (\\u002F)|(\\u002F[\\u0021-\\u007E]+\\u002F)")
	case trust == "":
		return "", validationError("assumeRolePolicyDocument", "", "Member must not be null")
	}
	maxSession := 3600
	if v := f.Get("MaxSessionDuration"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 3600 || n > 43200 {
			return "", validationError("maxSessionDuration", v, "Member must have value between 3600 and 43200")
		}
		maxSession = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.roles[name]; ok {
		return "", &iamError{http.StatusConflict, "EntityAlreadyExists", "Role with name " + name + " already exists."}
	}
	r := &iamRole{name: name, path: path, arn: "arn:aws:iam::" + s.account + ":role" + path + name,
		id: "AROA" + strings.ToUpper(awstest.RandomHex(8)), description: f.Get("Description"), trust: trust,
		maxSession: maxSession, created: time.Now().UTC().Truncate(time.Second), policies: map[string]string{}}
	if err := s.sts.SetTrustPolicy(r.arn, trust); err != nil {
		return "", malformed("The trust policy is not one the sandbox can evaluate: " + err.Error())
	}
	s.roles[name] = r
	s.sts.SetPermissionsPolicy(r.arn, r.permissions()) // nothing allowed until PutRolePolicy
	s.out.printf("iam: CreateRole %s: %s", r.arn, describeTrust(trust))
	return r.xml(), nil
}

func (s *iamService) getRole(f url.Values) (string, *iamError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, e := s.role(f)
	if e != nil {
		return "", e
	}
	return r.xml(), nil
}

func (s *iamService) updateTrust(f url.Values) *iamError {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, e := s.role(f)
	if e != nil {
		return e
	}
	doc := f.Get("PolicyDocument")
	if doc == "" {
		return validationError("policyDocument", "", "Member must not be null")
	}
	if err := s.sts.SetTrustPolicy(r.arn, doc); err != nil {
		return malformed("The trust policy is not one the sandbox can evaluate: " + err.Error())
	}
	r.trust = doc
	s.out.printf("iam: UpdateAssumeRolePolicy %s: %s", r.arn, describeTrust(doc))
	return nil
}

func (s *iamService) putRolePolicy(f url.Values) *iamError {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, e := s.role(f)
	if e != nil {
		return e
	}
	name, doc := f.Get("PolicyName"), f.Get("PolicyDocument")
	if !iamPolicyRe.MatchString(name) {
		return validationError("policyName", name, "Member must satisfy regular expression pattern: [\\w+=,.@-]+, length 1-128")
	}
	if doc == "" {
		return validationError("policyDocument", "", "Member must not be null")
	}
	grants, err := permissionStatements(doc)
	if err != nil {
		return malformed(err.Error())
	}
	r.policies[name] = doc
	s.sts.SetPermissionsPolicy(r.arn, r.permissions())
	var says []string
	for _, g := range grants {
		says = append(says, g.summary())
	}
	s.out.printf("iam: PutRolePolicy %s %s: allows %s", r.arn, name, strings.Join(says, "; "))
	return nil
}

func (s *iamService) getRolePolicy(f url.Values) (string, *iamError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, e := s.role(f)
	if e != nil {
		return "", e
	}
	name := f.Get("PolicyName")
	doc, ok := r.policies[name]
	if !ok {
		return "", &iamError{http.StatusNotFound, "NoSuchEntity", "The role policy with name " + name + " cannot be found."}
	}
	return fmt.Sprintf("    <RoleName>%s</RoleName>\n    <PolicyName>%s</PolicyName>\n    <PolicyDocument>%s</PolicyDocument>\n",
		awstest.XMLEscape(r.name), awstest.XMLEscape(name), awstest.XMLEscape(url.PathEscape(doc))), nil
}

func (s *iamService) deleteRolePolicy(f url.Values) *iamError {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, e := s.role(f)
	if e != nil {
		return e
	}
	name := f.Get("PolicyName")
	if _, ok := r.policies[name]; !ok {
		return &iamError{http.StatusNotFound, "NoSuchEntity", "The role policy with name " + name + " cannot be found."}
	}
	delete(r.policies, name)
	s.sts.SetPermissionsPolicy(r.arn, r.permissions())
	s.out.printf("iam: DeleteRolePolicy %s %s", r.arn, name)
	return nil
}

// xml is the <Role> element; its policy document is URL-encoded, as IAM answers it.
func (r *iamRole) xml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "    <Role>\n      <Path>%s</Path>\n      <RoleName>%s</RoleName>\n      <RoleId>%s</RoleId>\n      <Arn>%s</Arn>\n",
		awstest.XMLEscape(r.path), awstest.XMLEscape(r.name), r.id, awstest.XMLEscape(r.arn))
	fmt.Fprintf(&b, "      <CreateDate>%s</CreateDate>\n      <AssumeRolePolicyDocument>%s</AssumeRolePolicyDocument>\n",
		r.created.Format("2006-01-02T15:04:05Z"), awstest.XMLEscape(url.PathEscape(r.trust)))
	if r.description != "" {
		fmt.Fprintf(&b, "      <Description>%s</Description>\n", awstest.XMLEscape(r.description))
	}
	fmt.Fprintf(&b, "      <MaxSessionDuration>%d</MaxSessionDuration>\n    </Role>\n", r.maxSession)
	return b.String()
}

// permissions is the role's inline policies as one document for STS: every statement of
// each, in the order of the policies' names. No policy: no statement, nothing allowed.
func (r *iamRole) permissions() string {
	all := []json.RawMessage{}
	names := make([]string, 0, len(r.policies))
	for n := range r.policies {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		raw, _ := statementsOf(r.policies[n]) // checked by PutRolePolicy
		all = append(all, raw...)
	}
	b, _ := json.Marshal(map[string]any{"Version": "2012-10-17", "Statement": all})
	return string(b)
}

// grant is one statement of a permissions policy, as the sandbox evaluates it.
type grant struct {
	Effect    string
	Action    awstest.StringList
	Resource  awstest.StringList
	Condition map[string]map[string]any
}

func (g grant) summary() string {
	s := g.Effect + " " + strings.Join(g.Action, ",") + " on " + strings.Join(g.Resource, ",")
	if g.Effect == "Allow" {
		s = strings.Join(g.Action, ",") + " on " + strings.Join(g.Resource, ",")
	}
	if len(g.Condition) > 0 {
		s += " (its condition is not evaluated here)"
	}
	return s
}

// statementsOf reads a policy's Statement, one object or a list, as raw statements.
func statementsOf(doc string) ([]json.RawMessage, error) {
	var d struct {
		Version   string
		Statement json.RawMessage
	}
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return nil, fmt.Errorf("Syntax errors in policy: %v", err)
	}
	if d.Version != "2012-10-17" && d.Version != "2008-10-17" {
		return nil, fmt.Errorf("The policy must name Version 2012-10-17")
	}
	s := strings.TrimSpace(string(d.Statement))
	if strings.HasPrefix(s, "{") {
		return []json.RawMessage{d.Statement}, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(d.Statement, &list); err != nil || len(list) == 0 {
		return nil, fmt.Errorf("Syntax errors in policy: Statement must be an object or a list of them")
	}
	return list, nil
}

// permissionStatements checks a permissions policy is one the sandbox evaluates as AWS
// would: Allow or Deny, Action and Resource (no NotAction or NotResource, no Principal).
func permissionStatements(doc string) ([]grant, error) {
	raws, err := statementsOf(doc)
	if err != nil {
		return nil, err
	}
	var out []grant
	for i, raw := range raws {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(raw, &keys); err != nil {
			return nil, fmt.Errorf("Syntax errors in policy: statement %d is not an object", i)
		}
		for k := range keys {
			switch k {
			case "Sid", "Effect", "Action", "Resource", "Condition":
			case "Principal", "NotPrincipal":
				return nil, fmt.Errorf("Policy document should not specify a principal.")
			default:
				return nil, fmt.Errorf("statement %d: %s is not evaluated here", i, k)
			}
		}
		var g grant
		if err := json.Unmarshal(raw, &g); err != nil {
			return nil, fmt.Errorf("Syntax errors in policy: statement %d: %v", i, err)
		}
		if g.Effect != "Allow" && g.Effect != "Deny" || len(g.Action) == 0 || len(g.Resource) == 0 {
			return nil, fmt.Errorf("Syntax errors in policy: statement %d needs Effect (Allow or Deny), Action and Resource", i)
		}
		out = append(out, g)
	}
	return out, nil
}

// describeTrust says whom a trust policy lets in and with which ExternalId, for the log.
func describeTrust(doc string) string {
	var d struct {
		Statement []struct {
			Effect    string
			Principal struct{ AWS awstest.StringList }
			Condition map[string]map[string]awstest.StringList
		}
	}
	if json.Unmarshal([]byte(doc), &d) != nil || len(d.Statement) == 0 {
		return "trust policy set"
	}
	var says []string
	for _, st := range d.Statement {
		s := st.Effect + " " + strings.Join(st.Principal.AWS, ",")
		if ids := st.Condition["StringEquals"]["sts:ExternalId"]; len(ids) > 0 {
			s += " with ExternalId " + strings.Join(ids, ",")
		} else {
			s += " (no ExternalId condition)"
		}
		says = append(says, s)
	}
	return "trusts " + strings.Join(says, "; ")
}

func writeIAMError(w http.ResponseWriter, e *iamError) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(e.status)
	fmt.Fprintf(w, `<ErrorResponse xmlns="https://iam.amazonaws.com/doc/%s/">
  <Error>
    <Type>Sender</Type>
    <Code>%s</Code>
    <Message>%s</Message>
  </Error>
  <RequestId>%s</RequestId>
</ErrorResponse>
`, iamVersion, awstest.XMLEscape(e.code), awstest.XMLEscape(e.message), requestID())
}

// requestID is a request id in the form AWS gives one: a random lowercase UUID.
func requestID() string {
	h := awstest.RandomHex(16)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
