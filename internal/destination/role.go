package destination

import "strings"

// The customer's role, as the card's CloudFormation template, Terraform snippet and AWS
// CLI commands create it: every form takes its name, its path and its two policies from
// here and from the card's policies (TrustPolicy, PermissionsPolicy, KMSStatement), so
// the forms and the card's JSON cannot say different things.

// RolePolicy is the role's one inline policy as every form writes it: the card's
// permissions policy, and the card's KMS statement after it when the card shows one.
func RolePolicy(d Destination) PolicyDocument {
	p := PermissionsPolicy(d)
	if s := KMSStatement(d); s != nil {
		p.Statement = append(p.Statement, *s)
	}
	return p
}

// RoleName is the name and the path of the role d.RoleARN names
// (arn:aws:iam::ACCOUNT:role/PATH/NAME): path is "/" when the ARN has none, else the
// path with its slashes ("/PATH/"). Both are "" when d.RoleARN is not a role ARN.
func RoleName(d Destination) (name, path string) {
	a, err := ParseARN(d.RoleARN)
	if err != nil || !strings.HasPrefix(a.Resource, "role/") {
		return "", ""
	}
	rest := strings.TrimPrefix(a.Resource, "role")
	i := strings.LastIndexByte(rest, '/')
	return rest[i+1:], rest[:i+1]
}

// RolePolicyName is the name of the role's inline policy: <name>-delivery (the deployment's
// identity.name), the same in every form.
func RolePolicyName(id Identity) string { return id.NameOrDefault() + "-delivery" }

// StackName is the CloudFormation stack the card suggests for d's role: <name>-<id>,
// every character a stack name may not hold (letters, digits and '-' only, a letter
// first, at most 128) made a '-'.
func StackName(d Destination, id Identity) string {
	s := safeName(id.NameOrDefault()+"-"+d.ID, func(r rune) bool {
		return r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	}, '-')
	return truncate(s, 128)
}

// resourceLabel names d's blocks in the Terraform snippet: <name>_<id>, every character
// but letters, digits and '_' made a '_', so the snippets of several destinations can live
// in one module.
func resourceLabel(d Destination, id Identity) string {
	return safeName(id.NameOrDefault()+"_"+d.ID, func(r rune) bool {
		return r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	}, '_')
}

// safeName is s with each rune ok refuses replaced by with.
func safeName(s string, ok func(rune) bool, with rune) string {
	return strings.Map(func(r rune) rune {
		if ok(r) {
			return r
		}
		return with
	}, s)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
