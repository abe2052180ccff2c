package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// `sandbox aws iam COMMAND [--flag value]…` stands in for the AWS CLI where it is not
// installed, for the IAM commands a destination card gives (create-role,
// put-role-policy, and get-role, update-assume-role-policy, get-role-policy,
// delete-role-policy): it takes the arguments as the shell split them, exactly as the
// card's command line has them, and sends the request the AWS CLI would (the IAM Query
// API, signed with SigV4) to the sandbox's IAM, printing what the AWS CLI prints. The
// endpoint is --endpoint-url, else $AWS_ENDPOINT_URL_IAM, else $AWS_ENDPOINT_URL, else
// http://127.0.0.1:24586; only a loopback one is called. The keys are
// $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY, or dummy ones (the sandbox checks none).
//
// Like the AWS CLI: a value file://PATH is read from the file; --flag=value is
// --flag value; global options (--endpoint-url, --region, --output json, --no-cli-pager,
// --profile) may come anywhere. It exits 0, 252 for a command line it refuses, 254 for
// an error answer, 255 when the endpoint cannot be reached.

const defaultIAMEndpoint = "http://127.0.0.1:24586"

// iamCommand is one command: its action, required and optional flags (without --).
type iamCommand struct {
	action             string
	required, optional []string
}

var iamCommands = map[string]iamCommand{
	"create-role":               {"CreateRole", []string{"role-name", "assume-role-policy-document"}, []string{"path", "description", "max-session-duration"}},
	"get-role":                  {"GetRole", []string{"role-name"}, nil},
	"update-assume-role-policy": {"UpdateAssumeRolePolicy", []string{"role-name", "policy-document"}, nil},
	"put-role-policy":           {"PutRolePolicy", []string{"role-name", "policy-name", "policy-document"}, nil},
	"get-role-policy":           {"GetRolePolicy", []string{"role-name", "policy-name"}, nil},
	"delete-role-policy":        {"DeleteRolePolicy", []string{"role-name", "policy-name"}, nil},
}

var awsGlobals = map[string]bool{"endpoint-url": true, "region": true, "output": true, "profile": true, "no-cli-pager": false}

const awsUsage = `usage: sandbox aws [--endpoint-url URL] iam COMMAND [--flag value]…

The AWS CLI's IAM commands, sent to the sandbox's IAM (default http://127.0.0.1:24586, or
$AWS_ENDPOINT_URL_IAM). Commands:
  create-role --role-name NAME --assume-role-policy-document JSON [--path P] [--description D] [--max-session-duration S]
  put-role-policy --role-name NAME --policy-name NAME --policy-document JSON
  get-role --role-name NAME
  update-assume-role-policy --role-name NAME --policy-document JSON
  get-role-policy --role-name NAME --policy-name NAME
  delete-role-policy --role-name NAME --policy-name NAME
A value file://PATH is read from PATH.
`

// awsCLI runs one command line; it answers the exit status.
func awsCLI(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "usage: sandbox aws [--endpoint-url URL] iam COMMAND [--flag value]… (sandbox aws help)\naws: error: %s\n", fmt.Sprintf(format, a...))
		return 252
	}
	globals := map[string]string{}
	var words []string     // service and command
	flags := [][2]string{} // the command's, in order
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "help" || a == "--help" || a == "-h" {
			fmt.Fprint(stdout, awsUsage)
			return 0
		}
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			if len(words) == 2 {
				return usage("unrecognized argument %q", a)
			}
			words = append(words, a)
			continue
		}
		name, value, inline := strings.Cut(name, "=")
		takesValue, global := awsGlobals[name]
		if global && !takesValue {
			continue
		}
		if !inline {
			if i+1 >= len(args) {
				return usage("argument --%s: expected one argument", name)
			}
			i++
			value = args[i]
		}
		if global {
			globals[name] = value
		} else {
			flags = append(flags, [2]string{name, value})
		}
	}
	if len(words) == 0 || words[0] != "iam" {
		return usage("the sandbox's aws serves only iam: aws iam COMMAND …")
	}
	if len(words) < 2 {
		return usage("the following arguments are required: operation")
	}
	cmd, ok := iamCommands[words[1]]
	if !ok {
		return usage("argument operation: Invalid choice %q: the sandbox's aws iam knows create-role, put-role-policy, get-role, update-assume-role-policy, get-role-policy, delete-role-policy", words[1])
	}
	if out := globals["output"]; out != "" && out != "json" {
		return usage("--output %s: the sandbox's aws prints json only", out)
	}
	form := url.Values{"Action": {cmd.action}, "Version": {iamVersion}}
	known := map[string]bool{}
	for _, f := range append(append([]string{}, cmd.required...), cmd.optional...) {
		known[f] = true
	}
	for _, f := range flags {
		if !known[f[0]] {
			return usage("Unknown options: --%s", f[0])
		}
		value := f[1]
		if path, ok := strings.CutPrefix(value, "file://"); ok {
			b, err := os.ReadFile(path)
			if err != nil {
				return usage("Error parsing parameter '--%s': Unable to load paramfile %s: %v", f[0], value, err)
			}
			value = string(b)
		}
		form.Set(pascal(f[0]), value)
	}
	var missing []string
	for _, f := range cmd.required {
		if !form.Has(pascal(f)) {
			missing = append(missing, "--"+f)
		}
	}
	if len(missing) > 0 {
		return usage("the following arguments are required: %s", strings.Join(missing, ", "))
	}

	endpoint := globals["endpoint-url"]
	for _, env := range []string{"AWS_ENDPOINT_URL_IAM", "AWS_ENDPOINT_URL", ""} {
		if endpoint == "" && env != "" {
			endpoint = getenv(env)
		}
	}
	if endpoint == "" {
		endpoint = defaultIAMEndpoint
	}
	if u, err := url.Parse(endpoint); err != nil || u.Scheme != "http" || !isLoopback(u.Hostname()) {
		return usage("endpoint %q: the sandbox's aws calls only the sandbox, http://127.0.0.1:PORT", endpoint)
	}
	body, status, err := callIAM(ctx, endpoint, form, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "\nCould not connect to the endpoint URL: %q (%v)\n", endpoint, err)
		return 255
	}
	var resp struct {
		Error struct{ Code, Message string } `xml:"Error"`
		Parts []struct {
			XMLName                              xml.Name
			Role                                 *xmlRole `xml:"Role"`
			RoleName, PolicyName, PolicyDocument string
		} `xml:",any"`
	}
	if err := xml.Unmarshal(body, &resp); err != nil {
		fmt.Fprintf(stderr, "\nAn error occurred when calling the %s operation: the answer (HTTP %d) is not IAM's XML: %.200s\n", cmd.action, status, body)
		return 254
	}
	if status != http.StatusOK || resp.Error.Code != "" {
		fmt.Fprintf(stderr, "\nAn error occurred (%s) when calling the %s operation: %s\n", resp.Error.Code, cmd.action, resp.Error.Message)
		return 254
	}
	var out any
	for _, p := range resp.Parts {
		if p.XMLName.Local != cmd.action+"Result" {
			continue
		}
		switch {
		case p.Role != nil:
			out = map[string]any{"Role": p.Role.cli()}
		case p.PolicyName != "":
			out = map[string]any{"RoleName": p.RoleName, "PolicyName": p.PolicyName, "PolicyDocument": decodedPolicy(p.PolicyDocument)}
		}
	}
	if out != nil {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "    ")
		enc.Encode(out)
	}
	return 0
}

// callIAM POSTs the form to endpoint, signed as the AWS CLI signs it (SigV4, service iam,
// region us-east-1), and answers the body and status.
func callIAM(ctx context.Context, endpoint string, form url.Values, getenv func(string) string) ([]byte, int, error) {
	payload := form.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(endpoint, "/")+"/", strings.NewReader(payload))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	creds := aws.Credentials{AccessKeyID: getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken: getenv("AWS_SESSION_TOKEN")}
	if creds.AccessKeyID == "" || creds.SecretAccessKey == "" {
		creds = aws.Credentials{AccessKeyID: "AKIDSANDBOXCUSTOMER", SecretAccessKey: "sandbox-customer-secret"}
	}
	sum := sha256.Sum256([]byte(payload))
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "iam", "us-east-1", time.Now()); err != nil {
		return nil, 0, err
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return body, resp.StatusCode, err
}

// pascal is a flag's Query parameter: role-name → RoleName.
func pascal(flag string) string {
	var b strings.Builder
	for _, w := range strings.Split(flag, "-") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// xmlRole is IAM's <Role>.
type xmlRole struct {
	Path, RoleName, RoleId, Arn, CreateDate, AssumeRolePolicyDocument, Description string
	MaxSessionDuration                                                             int
}

// cli is the role as the AWS CLI prints it: the policy document decoded into JSON.
func (r *xmlRole) cli() any {
	type role struct {
		Path                     string `json:"Path"`
		RoleName                 string `json:"RoleName"`
		RoleID                   string `json:"RoleId"`
		Arn                      string `json:"Arn"`
		CreateDate               string `json:"CreateDate"`
		AssumeRolePolicyDocument any    `json:"AssumeRolePolicyDocument"`
		Description              string `json:"Description,omitempty"`
		MaxSessionDuration       int    `json:"MaxSessionDuration,omitempty"`
	}
	return role{r.Path, r.RoleName, r.RoleId, r.Arn, r.CreateDate, decodedPolicy(r.AssumeRolePolicyDocument), r.Description, r.MaxSessionDuration}
}

// decodedPolicy is a URL-encoded policy document as the AWS CLI prints it: its JSON, or
// the text when it is not JSON.
func decodedPolicy(enc string) any {
	doc, err := url.PathUnescape(enc)
	if err != nil {
		doc = enc
	}
	if !json.Valid([]byte(doc)) {
		return doc
	}
	return json.RawMessage(doc) // its members in their order, as the AWS CLI keeps them
}

// cardLines is `sandbox card FIELD`: it reads a destination card (the API's JSON) on
// stdin and prints each string of its setup.FIELD (aws_cli, commands), each ended by a
// NUL, for a shell to read (bash: mapfile -d "") and run as the customer would. A card
// without the field prints nothing.
func cardLines(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: sandbox card FIELD < card.json   (FIELD: aws_cli, commands)")
		return 2
	}
	var card struct {
		Setup map[string]json.RawMessage `json:"setup"`
	}
	if err := json.NewDecoder(stdin).Decode(&card); err != nil {
		fmt.Fprintf(stderr, "sandbox card: the input is not a card: %v\n", err)
		return 1
	}
	var lines []string
	if raw, ok := card.Setup[args[0]]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &lines); err != nil {
			fmt.Fprintf(stderr, "sandbox card: setup.%s is not a list of strings: %v\n", args[0], err)
			return 1
		}
	}
	for _, l := range lines {
		fmt.Fprint(stdout, l+"\x00")
	}
	return 0
}
