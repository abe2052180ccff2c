package awstest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// CallerARN is the principal every caller of the test STS is taken to be: the relay's
// own. Trust policies name it (or its account) to let the relay in.
const CallerARN = "arn:aws:iam::999999999999:role/relay-delivery"

// callerAccount is CallerARN's AWS account.
const callerAccount = "999999999999"

// trustPolicy is a role's trust policy, parsed. Its statements are evaluated as IAM
// does for sts:AssumeRole: allowed when some Allow statement matches and no Deny does.
type trustPolicy struct {
	statements []statement
	lookup     func() string // when set, the policy is externalIDPolicy(lookup()) at each call
}

type statement struct {
	allow      bool
	principals []string // "*", an ARN, an account's root ARN or an account id
	actions    []string // with IAM's wildcards, matched without regard to case
	conditions []condition
}

// condition is one operator on one key with its values: any value may match.
type condition struct {
	op       string // StringEquals, StringNotEquals, StringLike, StringNotLike
	ifExists bool
	key      string // lower case: condition keys are not case-sensitive
	values   []string
}

// contextKeys are the condition keys the test STS knows for AssumeRole.
var contextKeys = map[string]bool{"sts:externalid": true, "sts:rolesessionname": true}

// parseTrustPolicy reads a trust policy document, refusing what it cannot evaluate as
// AWS would (NotPrincipal, NotAction, other operators or keys) rather than guessing.
func parseTrustPolicy(doc string) (trustPolicy, error) {
	var raw struct {
		Statement json.RawMessage
	}
	if err := json.Unmarshal([]byte(doc), &raw); err != nil {
		return trustPolicy{}, fmt.Errorf("trust policy is not JSON: %w", err)
	}
	type rawStatement struct {
		Effect       string
		Principal    json.RawMessage
		Action       StringList
		NotAction    json.RawMessage
		NotPrincipal json.RawMessage
		Condition    map[string]map[string]StringList
	}
	var list []rawStatement
	if len(raw.Statement) > 0 && raw.Statement[0] == '{' {
		var one rawStatement
		if err := json.Unmarshal(raw.Statement, &one); err != nil {
			return trustPolicy{}, fmt.Errorf("trust policy statement: %w", err)
		}
		list = []rawStatement{one}
	} else if len(raw.Statement) > 0 {
		if err := json.Unmarshal(raw.Statement, &list); err != nil {
			return trustPolicy{}, fmt.Errorf("trust policy statements: %w", err)
		}
	}
	var p trustPolicy
	for i, rs := range list {
		if rs.NotAction != nil || rs.NotPrincipal != nil {
			return trustPolicy{}, fmt.Errorf("statement %d: NotAction and NotPrincipal are not evaluated here", i)
		}
		if rs.Effect != "Allow" && rs.Effect != "Deny" {
			return trustPolicy{}, fmt.Errorf("statement %d: Effect %q", i, rs.Effect)
		}
		st := statement{allow: rs.Effect == "Allow", actions: rs.Action}
		var err error
		if st.principals, err = parsePrincipal(rs.Principal); err != nil {
			return trustPolicy{}, fmt.Errorf("statement %d: %w", i, err)
		}
		for op, keys := range rs.Condition {
			base, ifExists := strings.CutSuffix(op, "IfExists")
			switch base {
			case "StringEquals", "StringNotEquals", "StringLike", "StringNotLike":
			default:
				return trustPolicy{}, fmt.Errorf("statement %d: condition operator %s is not evaluated here", i, op)
			}
			for key, values := range keys {
				k := strings.ToLower(key)
				if !contextKeys[k] {
					return trustPolicy{}, fmt.Errorf("statement %d: condition key %s is not evaluated here", i, key)
				}
				st.conditions = append(st.conditions, condition{op: base, ifExists: ifExists, key: k, values: values})
			}
		}
		p.statements = append(p.statements, st)
	}
	return p, nil
}

// parsePrincipal reads "*" or {"AWS": "…" | ["…"]}.
func parsePrincipal(raw json.RawMessage) ([]string, error) {
	var star string
	if json.Unmarshal(raw, &star) == nil {
		if star != "*" {
			return nil, fmt.Errorf("Principal %q: only \"*\" or {\"AWS\": …}", star)
		}
		return []string{"*"}, nil
	}
	var m map[string]StringList
	if err := json.Unmarshal(raw, &m); err != nil || len(m["AWS"]) == 0 {
		return nil, fmt.Errorf("Principal %s: only \"*\" or {\"AWS\": …} is evaluated here", raw)
	}
	return m["AWS"], nil
}

// allows evaluates the policy for an AssumeRole by CallerARN with the given context
// (keys in lower case; a key that is absent was not sent).
func (p trustPolicy) allows(ctx map[string]string) bool {
	allowed := false
	for _, st := range p.statements {
		if !st.matches(ctx) {
			continue
		}
		if !st.allow {
			return false // an explicit Deny wins
		}
		allowed = true
	}
	return allowed
}

func (st statement) matches(ctx map[string]string) bool {
	principal := false
	for _, pr := range st.principals {
		principal = principal || pr == "*" || pr == CallerARN || pr == callerAccount ||
			pr == "arn:aws:iam::"+callerAccount+":root"
	}
	action := false
	for _, a := range st.actions {
		action = action || like(strings.ToLower(a), "sts:assumerole")
	}
	if !principal || !action {
		return false
	}
	for _, c := range st.conditions {
		if !c.holds(ctx) {
			return false
		}
	}
	return true
}

// holds evaluates one condition as IAM does: a positive operator needs the key present
// and any value to match; a negated one holds when the key is absent or no value matches;
// ...IfExists holds when the key is absent.
func (c condition) holds(ctx map[string]string) bool {
	v, present := ctx[c.key]
	if !present {
		return c.ifExists || strings.HasPrefix(c.op, "StringNot")
	}
	matched := false
	for _, want := range c.values {
		switch c.op {
		case "StringEquals", "StringNotEquals":
			matched = matched || v == want
		case "StringLike", "StringNotLike":
			matched = matched || like(want, v)
		}
	}
	if strings.HasPrefix(c.op, "StringNot") {
		return !matched
	}
	return matched
}

// like matches s against an IAM pattern, case-sensitively: '*' is any run of
// characters (empty too), '?' exactly one.
func like(pattern, s string) bool {
	p, t := []rune(pattern), []rune(s)
	pi, ti := 0, 0
	star, mark := -1, 0 // the last '*' seen, and where in t it started matching
	for ti < len(t) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == t[ti]):
			pi++
			ti++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ti
			pi++
		case star >= 0: // let the last '*' take one more character
			mark++
			pi, ti = star+1, mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// StringList is a JSON string or list of strings, as IAM policies write values (the
// sandbox's IAM reads its policies with it too).
type StringList []string

func (l *StringList) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*l = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("want a string or a list of strings, got %s", b)
	}
	*l = many
	return nil
}
