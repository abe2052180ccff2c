package destination

import "strings"

// AWSCLI is the card's AWS CLI commands for d: create the role as d.RoleARN names it with
// the card's trust policy for externalID, then put RolePolicy(d) on it as its inline
// policy. Each is one line a POSIX shell runs as it is: every argument a shell could
// split or expand is single-quoted (the policies always are). nil for a non-AWS d.
func AWSCLI(d Destination, id Identity, externalID string) []string {
	if !d.Connector.IsAWS() {
		return nil
	}
	name, path := RoleName(d)
	create := []string{"aws", "iam", "create-role", "--role-name", name}
	if path != "/" {
		create = append(create, "--path", path)
	}
	create = append(create, "--assume-role-policy-document", TrustPolicy(id.AWSPrincipalARN, externalID).JSON())
	put := []string{"aws", "iam", "put-role-policy", "--role-name", name,
		"--policy-name", RolePolicyName(id), "--policy-document", RolePolicy(d).JSON()}
	return []string{shellLine(create), shellLine(put)}
}

// shellLine joins args into one line a POSIX shell splits back into exactly args.
func shellLine(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// shellQuote is s as one shell word: bare when it holds only characters no shell treats
// specially (and starts with no '=', which zsh expands), else in single quotes (a ' inside closes them, adds \' and opens them again).
func shellQuote(s string) string {
	if s != "" && s[0] != '=' && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
