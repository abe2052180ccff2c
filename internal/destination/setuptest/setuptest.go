// Package setuptest reads a card's setup back with the tools customers use on it: the
// CloudFormation template with cfn-lint and goformation (the AWS CloudFormation Go
// types), the Terraform with hcl, the AWS CLI commands with /bin/sh, and the quick-create
// link with the connector's parameterised template; each must carry exactly the card's
// JSON policies. It works on the card's setup as JSON (map[string]any) and imports no
// relay package but testpeer, so the destination package's own tests use it too. Only
// tests import it.
package setuptest

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/awslabs/goformation/v7"
	"github.com/awslabs/goformation/v7/cloudformation"
	"github.com/awslabs/goformation/v7/cloudformation/iam"
	"github.com/awslabs/goformation/v7/intrinsics"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"

	"github.com/mercamap/relay/internal/testpeer"
)

// Role is the role a card's forms must make: its name and path as the destination's
// role_arn names them (Path "/" when it has none), and its inline policy's name.
type Role struct{ Name, Path, PolicyName string }

// RoleOf is the role role_arn (arn:aws:iam::ACCOUNT:role/PATH/NAME) names, with
// policyName.
func RoleOf(t testing.TB, roleARN, policyName string) Role {
	t.Helper()
	parts := strings.SplitN(roleARN, ":", 6)
	if len(parts) != 6 || !strings.HasPrefix(parts[5], "role/") {
		t.Fatalf("%q is not a role ARN", roleARN)
	}
	rest := strings.TrimPrefix(parts[5], "role")
	i := strings.LastIndexByte(rest, '/')
	return Role{Name: rest[i+1:], Path: rest[:i+1], PolicyName: policyName}
}

// Setup is a card's setup as the API serves it: v (a map, or a card's "setup" decoded
// from JSON) through JSON.
func Setup(t testing.TB, v any) map[string]any {
	t.Helper()
	m, ok := JSON(t, v).(map[string]any)
	if !ok {
		t.Fatalf("setup is %T, not an object", v)
	}
	return m
}

// CardPolicies are the card's trust policy and the policy its role must have: its
// permissions policy, with its KMS statement added when it shows one.
func CardPolicies(t testing.TB, setup map[string]any) (trust, policy any) {
	t.Helper()
	perms, ok := JSON(t, setup["permissions_policy"]).(map[string]any)
	if !ok {
		t.Fatalf("setup.permissions_policy = %#v", setup["permissions_policy"])
	}
	if kms := setup["kms_statement"]; kms != nil {
		perms["Statement"] = append(perms["Statement"].([]any), kms)
	}
	return JSON(t, setup["trust_policy"]), perms
}

// JSON is v through JSON: maps, slices, strings, float64s (a fresh copy).
func JSON(t testing.TB, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// SameJSON fails unless got and want are the same JSON value.
func SameJSON(t testing.TB, what string, got, want any) {
	t.Helper()
	if g, w := JSON(t, got), JSON(t, want); !reflect.DeepEqual(g, w) {
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		t.Errorf("%s:\n got %s\nwant %s", what, gb, wb)
	}
}

func str(t testing.TB, setup map[string]any, key string) string {
	t.Helper()
	s, ok := setup[key].(string)
	if !ok || s == "" {
		t.Fatalf("setup.%s = %#v, want a string", key, setup[key])
	}
	return s
}

// getAttAsIs keeps Fn::GetAtt as written (goformation resolves it to nothing), so the
// output can be checked to name the role's ARN.
func getAttAsIs(name string, input, _ any) any { return map[string]any{name: input} }

// splitAsList is Fn::Split answering a list goformation's Fn::Select can index (its own
// answers a []string, which its Fn::Select does not take).
func splitAsList(name string, input, template any) any {
	var out []any
	for _, s := range intrinsics.FnSplit(name, input, template).([]string) {
		out = append(out, s)
	}
	return out
}

// CheckCloudFormation: goformation reads the card's template: no parameters, one
// AWS::IAM::Role (logical id Role) named and pathed as role, its AssumeRolePolicyDocument
// the card's trust policy, its one policy (role.PolicyName) the card's permissions policy
// with the KMS statement when the card shows one, and the output RoleArn its ARN.
func CheckCloudFormation(t testing.TB, name string, setup map[string]any, role Role) {
	t.Helper()
	body := str(t, setup, "cloudformation")
	tmpl, err := goformation.ParseYAMLWithOptions([]byte(body), &intrinsics.ProcessorOptions{
		IntrinsicHandlerOverrides: map[string]intrinsics.IntrinsicHandler{"Fn::GetAtt": getAttAsIs}})
	if err != nil {
		t.Fatalf("%s: goformation: %v\n%s", name, err, body)
	}
	if len(tmpl.Parameters) != 0 {
		t.Errorf("%s: the card's template has parameters %v: it is the destination's, filled in", name, tmpl.Parameters)
	}
	checkRole(t, name, tmpl, setup, role)
	out, ok := tmpl.Outputs["RoleArn"]
	if got := JSON(t, out.Value); !ok || !reflect.DeepEqual(got, map[string]any{"Fn::GetAtt": "Role.Arn"}) &&
		!reflect.DeepEqual(got, map[string]any{"Fn::GetAtt": []any{"Role", "Arn"}}) {
		t.Errorf("%s: output RoleArn = %#v, want !GetAtt Role.Arn", name, out.Value)
	}
}

// checkRole checks that tmpl's one resource is the card's role.
func checkRole(t testing.TB, name string, tmpl *cloudformation.Template, setup map[string]any, want Role) {
	t.Helper()
	if len(tmpl.Resources) != 1 {
		t.Errorf("%s: %d resources, want the role alone", name, len(tmpl.Resources))
	}
	role := mustRole(t, tmpl)
	path := "/"
	if role.Path != nil {
		path = *role.Path
	}
	if role.RoleName == nil || *role.RoleName != want.Name || path != want.Path {
		t.Errorf("%s: role %v at path %q, want %s at %s", name, role.RoleName, path, want.Name, want.Path)
	}
	trust, policy := CardPolicies(t, setup)
	SameJSON(t, name+": AssumeRolePolicyDocument", role.AssumeRolePolicyDocument, trust)
	if len(role.Policies) != 1 {
		t.Fatalf("%s: %d policies, want one", name, len(role.Policies))
	}
	if role.Policies[0].PolicyName != want.PolicyName {
		t.Errorf("%s: policy name %q, want %q", name, role.Policies[0].PolicyName, want.PolicyName)
	}
	SameJSON(t, name+": the role's policy", role.Policies[0].PolicyDocument, policy)
}

func mustRole(t testing.TB, tmpl *cloudformation.Template) *iam.Role {
	t.Helper()
	r, err := tmpl.GetIAMRoleWithName("Role")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// dropNoValue removes what Ref AWS::NoValue left (nil) from lists, as CloudFormation does.
func dropNoValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = dropNoValue(e)
		}
	case []any:
		out := []any{}
		for _, e := range v {
			if e != nil {
				out = append(out, dropNoValue(e))
			}
		}
		return out
	}
	return v
}

// QuickCreate is a card's quick-create link, read.
type QuickCreate struct {
	Region, TemplateURL, StackName string
	Params                         map[string]string // param_NAME → NAME: value
}

// CheckQuickCreate reads the card's quick_create_url: the CloudFormation console's
// quick-create (https://console.aws.amazon.com/cloudformation/home?region=…#/stacks/
// quickcreate?…); it names every parameter of template (the connector's parameterised
// template, the one at the link's templateURL) that has no default, and no parameter the
// template lacks; and goformation, given template with the link's values, makes the
// card's role exactly (name, path, both policies). It returns what the link says, for the
// caller to hold to the destination's values.
func CheckQuickCreate(t testing.TB, name string, setup map[string]any, template string, role Role) QuickCreate {
	t.Helper()
	link, err := url.Parse(str(t, setup, "quick_create_url"))
	if err != nil {
		t.Fatalf("%s: quick_create_url: %v", name, err)
	}
	if link.Scheme != "https" || link.Host != "console.aws.amazon.com" || link.Path != "/cloudformation/home" ||
		!strings.HasPrefix(link.Fragment, "/stacks/quickcreate?") {
		t.Errorf("%s: %s is not the CloudFormation console's quick-create", name, link)
	}
	q, err := url.ParseQuery(strings.TrimPrefix(link.EscapedFragment(), "/stacks/quickcreate?"))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out := QuickCreate{Region: link.Query().Get("region"), TemplateURL: q.Get("templateURL"), StackName: q.Get("stackName"),
		Params: map[string]string{}}
	overrides := map[string]any{}
	for k, v := range q {
		if p, ok := strings.CutPrefix(k, "param_"); ok {
			out.Params[p], overrides[p] = v[0], v[0]
		}
	}
	raw, err := intrinsics.ProcessYAML([]byte(template), &intrinsics.ProcessorOptions{NoProcess: true})
	if err != nil {
		t.Fatalf("%s: goformation: %v\n%s", name, err, template)
	}
	var bare struct{ Parameters map[string]map[string]any }
	if err := json.Unmarshal(raw, &bare); err != nil {
		t.Fatal(err)
	}
	for p, def := range bare.Parameters {
		if _, filled := out.Params[p]; !filled && def["Default"] == nil {
			t.Errorf("%s: parameter %s has no default and the link leaves it out", name, p)
		}
	}
	for p := range out.Params {
		if _, ok := bare.Parameters[p]; !ok {
			t.Errorf("%s: the link fills in %s, which the template does not have", name, p)
		}
	}
	tmpl, err := goformation.ParseYAMLWithOptions([]byte(template), &intrinsics.ProcessorOptions{
		ParameterOverrides: overrides, EvaluateConditions: true,
		IntrinsicHandlerOverrides: map[string]intrinsics.IntrinsicHandler{"Fn::GetAtt": getAttAsIs, "Fn::Split": splitAsList}})
	if err != nil {
		t.Fatalf("%s: goformation: %v\n%s", name, err, template)
	}
	r := mustRole(t, tmpl) // the template's own: checkRole reads it again
	for i := range r.Policies {
		r.Policies[i].PolicyDocument = dropNoValue(JSON(t, r.Policies[i].PolicyDocument))
	}
	checkRole(t, name+" (the parameterised template, the link's values)", tmpl, setup, role)
	return out
}

// Lint runs the npm cfn-lint (testpeer.CfnLint) on each template (name → its YAML), and
// AWS's Python cfn-lint too when it is on the PATH, failing on any error or warning.
func Lint(t testing.TB, templates map[string]string) {
	t.Helper()
	npm := testpeer.CfnLint(t)
	dir := t.TempDir()
	files := map[string]string{}
	for name, body := range templates {
		p := filepath.Join(dir, strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
				return r
			}
			return '_'
		}, name)+".yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		files[name] = p
	}
	var wg sync.WaitGroup
	for name, p := range files {
		wg.Go(func() {
			out, err := exec.Command(npm, "validate", p).CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("Template valid!")) || !bytes.Contains(out, []byte("0 warn")) {
				t.Errorf("%s: cfn-lint validate: %v\n%s\n%s", name, err, out, templates[name])
			}
		})
	}
	wg.Wait()
	// AWS's cfn-lint takes seconds to start: one run for every file.
	if py, err := exec.LookPath("cfn-lint"); err == nil {
		args := []string{"--"}
		for _, p := range files {
			args = append(args, p)
		}
		if out, err := exec.Command(py, args...).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s\n(files: %v)", py, err, out, files)
		}
	}
}

var hclFuncs = &hcl.EvalContext{Functions: map[string]function.Function{"jsonencode": stdlib.JSONEncodeFunc}}

// ParseHCL parses src as a Terraform file and checks terraform fmt would leave it as it is.
func ParseHCL(t testing.TB, name, src string) *hclsyntax.Body {
	t.Helper()
	f, diags := hclsyntax.ParseConfig([]byte(src), name+".tf", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("%s: hcl: %v\n%s", name, diags, src)
	}
	if formatted := hclwrite.Format([]byte(src)); string(formatted) != src {
		t.Errorf("%s: not as terraform fmt writes it:\n%s\nformatted:\n%s", name, src, formatted)
	}
	return f.Body.(*hclsyntax.Body)
}

// Blocks are body's blocks of type typ, by their labels joined with dots.
func Blocks(body *hclsyntax.Body, typ string) map[string]*hclsyntax.Block {
	out := map[string]*hclsyntax.Block{}
	for _, b := range body.Blocks {
		if b.Type == typ {
			out[strings.Join(b.Labels, ".")] = b
		}
	}
	return out
}

// EvalString evaluates a block's attribute (jsonencode the only function) to a string.
func EvalString(t testing.TB, b *hclsyntax.Block, attr string) string {
	t.Helper()
	a, ok := b.Body.Attributes[attr]
	if !ok {
		t.Fatalf("%s %v has no %s", b.Type, b.Labels, attr)
	}
	v, diags := a.Expr.Value(hclFuncs)
	if diags.HasErrors() || v.Type() != cty.String {
		t.Fatalf("%s %v: %s: %v (%s)", b.Type, b.Labels, attr, diags, v.Type().FriendlyName())
	}
	return v.AsString()
}

// Traversal is a block's attribute that refers to something (aws_iam_role.x.id), as a
// dotted name.
func Traversal(t testing.TB, b *hclsyntax.Block, attr string) string {
	t.Helper()
	a, ok := b.Body.Attributes[attr]
	if !ok {
		t.Fatalf("%s %v has no %s", b.Type, b.Labels, attr)
	}
	tr, diags := hcl.AbsTraversalForExpr(a.Expr)
	if diags.HasErrors() {
		t.Fatalf("%s %v: %s is not a reference: %v", b.Type, b.Labels, attr, diags)
	}
	var parts []string
	for _, s := range tr {
		switch s := s.(type) {
		case hcl.TraverseRoot:
			parts = append(parts, s.Name)
		case hcl.TraverseAttr:
			parts = append(parts, s.Name)
		}
	}
	return strings.Join(parts, ".")
}

func decodeJSON(t testing.TB, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	return v
}

// CheckTerraform: hcl parses the card's Terraform (as terraform fmt writes it): one
// aws_iam_role named and pathed as role, its assume_role_policy (jsonencode evaluated)
// the card's trust policy; one aws_iam_role_policy on that role (role.PolicyName), its
// policy the card's permissions policy with the KMS statement when the card shows one;
// one output, the role's ARN.
func CheckTerraform(t testing.TB, name string, setup map[string]any, want Role) {
	t.Helper()
	body := ParseHCL(t, name, str(t, setup, "terraform"))
	resources := Blocks(body, "resource")
	var role, policy *hclsyntax.Block
	for _, b := range resources {
		switch b.Labels[0] {
		case "aws_iam_role":
			role = b
		case "aws_iam_role_policy":
			policy = b
		}
	}
	if len(resources) != 2 || role == nil || policy == nil {
		t.Fatalf("%s: resources %v, want an aws_iam_role and an aws_iam_role_policy", name, resources)
	}
	ref := "aws_iam_role." + role.Labels[1]
	path := "/"
	if _, ok := role.Body.Attributes["path"]; ok {
		path = EvalString(t, role, "path")
	}
	if got := EvalString(t, role, "name"); got != want.Name || path != want.Path {
		t.Errorf("%s: role %s at %s, want %s at %s", name, got, path, want.Name, want.Path)
	}
	trust, perms := CardPolicies(t, setup)
	SameJSON(t, name+": assume_role_policy", decodeJSON(t, EvalString(t, role, "assume_role_policy")), trust)
	SameJSON(t, name+": policy", decodeJSON(t, EvalString(t, policy, "policy")), perms)
	if got := Traversal(t, policy, "role"); got != ref+".id" {
		t.Errorf("%s: the policy's role is %s, want %s.id", name, got, ref)
	}
	if got := EvalString(t, policy, "name"); got != want.PolicyName {
		t.Errorf("%s: policy name %s, want %s", name, got, want.PolicyName)
	}
	outs := Blocks(body, "output")
	if len(outs) != 1 {
		t.Fatalf("%s: outputs %v, want one", name, outs)
	}
	for _, o := range outs {
		if got := Traversal(t, o, "value"); got != ref+".arn" {
			t.Errorf("%s: output %v = %s, want %s.arn", name, o.Labels, got, ref)
		}
	}
}

// ShellWords is how /bin/sh splits line into words: it runs `set -- line` and prints each
// positional parameter NUL-terminated.
func ShellWords(t testing.TB, line string) []string {
	t.Helper()
	out, err := exec.Command("/bin/sh", "-c", "set -- "+line+"\nfor a; do printf '%s\\000' \"$a\"; done").Output()
	if err != nil {
		t.Fatalf("sh: %v: %s", err, line)
	}
	words := strings.Split(string(out), "\x00")
	return words[:len(words)-1]
}

// CheckAWSCLI: /bin/sh splits the card's two commands into aws iam create-role (role's
// name, its path when not /, the card's trust policy as --assume-role-policy-document)
// and aws iam put-role-policy (the same role, role.PolicyName, the card's permissions
// and KMS policy as --policy-document).
func CheckAWSCLI(t testing.TB, name string, setup map[string]any, role Role) {
	t.Helper()
	cli, ok := setup["aws_cli"].([]any)
	if !ok || len(cli) != 2 {
		t.Fatalf("%s: setup.aws_cli = %#v, want two commands", name, setup["aws_cli"])
	}
	trust, perms := CardPolicies(t, setup)
	create := ShellWords(t, cli[0].(string))
	want := []string{"aws", "iam", "create-role", "--role-name", role.Name}
	if role.Path != "/" {
		want = append(want, "--path", role.Path)
	}
	want = append(want, "--assume-role-policy-document")
	if len(create) != len(want)+1 || !reflect.DeepEqual(create[:len(want)], want) {
		t.Errorf("%s: create-role splits into %q", name, create)
	} else {
		SameJSON(t, name+": --assume-role-policy-document", decodeJSON(t, create[len(want)]), trust)
	}
	put := ShellWords(t, cli[1].(string))
	want = []string{"aws", "iam", "put-role-policy", "--role-name", role.Name, "--policy-name", role.PolicyName, "--policy-document"}
	if len(put) != len(want)+1 || !reflect.DeepEqual(put[:len(want)], want) {
		t.Errorf("%s: put-role-policy splits into %q", name, put)
	} else {
		SameJSON(t, name+": --policy-document", decodeJSON(t, put[len(want)]), perms)
	}
}

// CheckForms checks the card's three forms of the role (CheckCloudFormation,
// CheckTerraform, CheckAWSCLI); the caller lints the templates (Lint) once for all cards.
func CheckForms(t testing.TB, name string, setup map[string]any, role Role) {
	t.Helper()
	CheckCloudFormation(t, name, setup, role)
	CheckTerraform(t, name, setup, role)
	CheckAWSCLI(t, name, setup, role)
}
