package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/mercamap/relay/internal/awstest"
)

// The card's policies, as internal/destination writes them.
const (
	busARN    = "arn:aws:events:us-east-1:111122223333:event-bus/orders"
	streamARN = "arn:aws:kinesis:us-east-1:111122223333:stream/orders"
)

func trustFor(externalID string) string {
	return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"` + awstest.CallerARN +
		`"},"Action":"sts:AssumeRole","Condition":{"StringEquals":{"sts:ExternalId":"` + externalID + `"}}}]}`
}

func allow(action, resource string) string {
	return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"` + action + `","Resource":"` + resource + `"}]}`
}

// shellQuote quotes s for sh as the card does: in single quotes.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// shellSplit splits a command line as /bin/sh does, as a customer's shell would.
func shellSplit(t *testing.T, line string) []string {
	t.Helper()
	out, err := exec.Command("sh", "-c", `eval "set -- $1"; printf '%s\0' "$@"`, "_", line).Output()
	if err != nil {
		t.Fatalf("sh cannot split %s: %v", line, err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
}

// aws runs one card command line through sh's splitting and `sandbox aws` against b's
// IAM: its exit status, stdout and stderr.
func (b *box) aws(t *testing.T, line string) (int, string, string) {
	t.Helper()
	args := shellSplit(t, line)
	if args[0] != "aws" {
		t.Fatalf("%s is not an aws command", line)
	}
	var stdout, stderr bytes.Buffer
	env := map[string]string{"AWS_ENDPOINT_URL_IAM": "http://" + b.iam}
	code := awsCLI(t.Context(), args[1:], func(k string) string { return env[k] }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func (b *box) mustAWS(t *testing.T, line string) string {
	t.Helper()
	code, out, errs := b.aws(t, line)
	if code != 0 {
		t.Fatalf("%s: exit %d\n%s%s", line, code, out, errs)
	}
	return out
}

// session assumes roleARN with externalID as the relay does, with the real SDK.
func (b *box) session(t *testing.T, roleARN, externalID string) (aws.CredentialsProvider, error) {
	t.Helper()
	c := sts.New(sts.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + b.sts),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDRELAY", "relay-secret", ""), Retryer: aws.NopRetryer{}})
	out, err := c.AssumeRole(t.Context(), &sts.AssumeRoleInput{RoleArn: aws.String(roleARN), RoleSessionName: aws.String("mercamap-acct_demo"),
		ExternalId: aws.String(externalID), DurationSeconds: aws.Int32(900)})
	if err != nil {
		return nil, err
	}
	cr := out.Credentials
	return credentials.NewStaticCredentialsProvider(*cr.AccessKeyId, *cr.SecretAccessKey, *cr.SessionToken), nil
}

func (b *box) putEvent(t *testing.T, creds aws.CredentialsProvider, bus string) error {
	c := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + b.events),
		Credentials: creds, Retryer: aws.NopRetryer{}})
	_, err := c.PutEvents(t.Context(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
		EventBusName: aws.String(bus), Source: aws.String("com.mercamap"), DetailType: aws.String("job.completed"),
		Detail: aws.String(`{"event_id":"e1"}`)}}})
	return err
}

func (b *box) putRecord(t *testing.T, creds aws.CredentialsProvider, stream string) error {
	c := kinesis.New(kinesis.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + b.kinesis),
		Credentials: creds, Retryer: aws.NopRetryer{}})
	_, err := c.PutRecord(t.Context(), &kinesis.PutRecordInput{StreamName: aws.String("orders"), StreamARN: aws.String(stream),
		PartitionKey: aws.String("store-1"), Data: []byte(`{"n":1}`)})
	return err
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return fmt.Sprint(err)
}

// TestIAMRolesFromTheCardsCommands: the card's two AWS CLI commands, split by sh, make a
// role that STS and the buses then enforce: assumed only by our principal with the
// card's ExternalId, and writing only what the permissions policy allows.
func TestIAMRolesFromTheCardsCommands(t *testing.T) {
	b := start(t, awstest.StartKinesalite(t))
	b.post(t, "/streams", map[string]string{"name": "orders"}, nil)

	for _, c := range []struct {
		name, role, policy string
		write              func(creds aws.CredentialsProvider, target string) error
		target, other      string
	}{
		{"eventbridge", "mercamap-delivery", allow("events:PutEvents", busARN),
			func(creds aws.CredentialsProvider, target string) error { return b.putEvent(t, creds, target) },
			busARN, "arn:aws:events:us-east-1:111122223333:event-bus/other"},
		{"kinesis", "mercamap-stream-delivery", allow("kinesis:PutRecord", streamARN),
			func(creds aws.CredentialsProvider, target string) error { return b.putRecord(t, creds, target) },
			streamARN, "arn:aws:kinesis:us-east-1:111122223333:stream/other"},
	} {
		t.Run(c.name, func(t *testing.T) {
			roleARN := "arn:aws:iam::111122223333:role/" + c.role
			ext := "relay-" + c.name + "-0123456789abcdef"
			if _, err := b.session(t, roleARN, ext); errorCode(err) != "AccessDenied" {
				t.Fatalf("before create-role, AssumeRole: %v; want AccessDenied", err)
			}
			out := b.mustAWS(t, "aws iam create-role --role-name "+c.role+" --assume-role-policy-document "+shellQuote(trustFor(ext)))
			var made struct {
				Role struct {
					Arn                      string
					AssumeRolePolicyDocument json.RawMessage
				}
			}
			if err := json.Unmarshal([]byte(out), &made); err != nil || made.Role.Arn != roleARN || compact(made.Role.AssumeRolePolicyDocument) != trustFor(ext) {
				t.Fatalf("create-role printed %s (%v); want the role %s with the trust policy as sent", out, err, roleARN)
			}
			if _, err := b.session(t, roleARN, "relay-not-this-one"); errorCode(err) != "AccessDenied" {
				t.Fatalf("AssumeRole with another ExternalId: %v; want AccessDenied", err)
			}
			sess, err := b.session(t, roleARN, ext)
			if err != nil {
				t.Fatalf("AssumeRole with the card's ExternalId: %v", err)
			}
			// The role has no permissions policy yet: it may write nothing.
			if err := c.write(sess, c.target); errorCode(err) != "AccessDeniedException" || !strings.Contains(err.Error(), "no identity-based policy") {
				t.Fatalf("a write before put-role-policy: %v; want AccessDeniedException", err)
			}
			b.mustAWS(t, "aws iam put-role-policy --role-name "+c.role+" --policy-name relay-write --policy-document "+shellQuote(c.policy))
			if err := c.write(sess, c.target); err != nil {
				t.Fatalf("a write the permissions policy allows: %v", err)
			}
			if err := c.write(sess, c.other); errorCode(err) != "AccessDeniedException" {
				t.Fatalf("a write to another target: %v; want AccessDeniedException", err)
			}
			// Our own keys are no session of the role.
			if err := c.write(credentials.NewStaticCredentialsProvider("AKIDRELAY", "relay-secret", ""), c.target); err == nil {
				t.Fatal("a write signed with our own keys was taken")
			}
			got := b.mustAWS(t, "aws iam get-role-policy --role-name "+c.role+" --policy-name relay-write")
			if !strings.Contains(got, `"PolicyName": "relay-write"`) || !strings.Contains(got, c.target) {
				t.Errorf("get-role-policy printed %s", got)
			}
			// The trust policy changed to another ExternalId: the card's no longer gets in.
			b.mustAWS(t, "aws iam update-assume-role-policy --role-name "+c.role+" --policy-document "+shellQuote(trustFor("relay-changed-0000")))
			if _, err := b.session(t, roleARN, ext); errorCode(err) != "AccessDenied" {
				t.Fatalf("after update-assume-role-policy, AssumeRole with the old ExternalId: %v; want AccessDenied", err)
			}
			// Without its policy the role writes nothing again.
			b.mustAWS(t, "aws iam delete-role-policy --role-name "+c.role+" --policy-name relay-write")
			if err := c.write(sess, c.target); errorCode(err) != "AccessDeniedException" {
				t.Fatalf("a write after delete-role-policy: %v; want AccessDeniedException", err)
			}
		})
	}
	out := b.out.String()
	for _, want := range []string{"iam: CreateRole arn:aws:iam::111122223333:role/mercamap-delivery: trusts Allow " + awstest.CallerARN + " with ExternalId relay-eventbridge-0123456789abcdef",
		"iam: PutRolePolicy arn:aws:iam::111122223333:role/mercamap-stream-delivery relay-write: allows kinesis:PutRecord on " + streamARN} {
		if !strings.Contains(out, want) {
			t.Errorf("the sandbox's log lacks %q:\n%s", want, out)
		}
	}
}

// TestIAMRefusesAsIAMDoes: the errors the AWS CLI prints for IAM's answers, and the
// command lines the stand-in refuses before calling.
func TestIAMRefusesAsIAMDoes(t *testing.T) {
	b := start(t, "")
	b.mustAWS(t, "aws iam create-role --role-name r1 --assume-role-policy-document "+shellQuote(trustFor("relay-x1")))
	dir := t.TempDir()
	perms := filepath.Join(dir, "permissions.json")
	if err := os.WriteFile(perms, []byte(allow("events:PutEvents", busARN)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		line     string
		code     int
		stderr   string
		noOutput bool
	}{
		{"aws iam create-role --role-name r1 --assume-role-policy-document " + shellQuote(trustFor("relay-x1")), 254,
			"An error occurred (EntityAlreadyExists) when calling the CreateRole operation: Role with name r1 already exists.", true},
		{"aws iam put-role-policy --role-name nobody --policy-name p --policy-document " + shellQuote(allow("events:PutEvents", busARN)), 254,
			"An error occurred (NoSuchEntity) when calling the PutRolePolicy operation: The role with name nobody cannot be found.", true},
		{"aws iam put-role-policy --role-name r1 --policy-name p --policy-document '{\"Version\":\"2012-10-17\",'", 254,
			"(MalformedPolicyDocument)", true},
		{"aws iam put-role-policy --role-name r1 --policy-name p --policy-document " + shellQuote(trustFor("relay-x1")), 254,
			"Policy document should not specify a principal.", true},
		{"aws iam create-role --role-name r2 --assume-role-policy-document '{\"Statement\":[{\"Effect\":\"Allow\",\"NotPrincipal\":{\"AWS\":\"*\"},\"Action\":\"sts:AssumeRole\"}]}'", 254,
			"(MalformedPolicyDocument)", true},
		{"aws iam create-role --role-name 'bad name' --assume-role-policy-document " + shellQuote(trustFor("relay-x1")), 254, "(ValidationError)", true},
		{"aws iam create-role --role-name r3", 252, "the following arguments are required: --assume-role-policy-document", true},
		{"aws iam create-role --role-name r3 --assume-role-policy-document x --color on", 252, "Unknown options: --color", true},
		{"aws iam delete-role --role-name r1", 252, "Invalid choice", true},
		{"aws s3 ls", 252, "serves only iam", true},
		{"aws --endpoint-url https://iam.amazonaws.com iam get-role --role-name r1", 252, "calls only the sandbox", true},
		// As the AWS CLI takes them: --flag=value, file://, global options anywhere.
		{"aws iam put-role-policy --role-name=r1 --policy-name p --policy-document file://" + perms + " --output json --no-cli-pager", 0, "", true},
		{"aws iam get-role --role-name r1 --region us-east-1", 0, "", false},
	} {
		code, out, errs := b.aws(t, c.line)
		if code != c.code || !strings.Contains(errs, c.stderr) || (out == "") != c.noOutput {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, stderr with %q", c.line, code, out, errs, c.code, c.stderr)
		}
	}
	if !strings.Contains(b.out.String(), "iam: PutRolePolicy arn:aws:iam::111122223333:role/r1 p: allows events:PutEvents on "+busARN) {
		t.Errorf("the policy from file:// was not put:\n%s", b.out)
	}
}

// TestIAMTakesTheRealAWSCLI: where the AWS CLI is installed, its own create-role and
// put-role-policy against the sandbox make a role the sandbox enforces.
func TestIAMTakesTheRealAWSCLI(t *testing.T) {
	cli, err := exec.LookPath("aws")
	if err != nil {
		t.Skip("no aws on PATH: the stand-in's tests cover the same requests")
	}
	if err := exec.Command(cli, "--version").Run(); err != nil {
		t.Skipf("aws --version: %v", err)
	}
	b := start(t, "")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(cli, args...)
		for _, kv := range os.Environ() { // none of the machine's own AWS settings
			if !strings.HasPrefix(kv, "AWS_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, "AWS_ENDPOINT_URL_IAM=http://"+b.iam, "AWS_ACCESS_KEY_ID=AKIDCUSTOMER",
			"AWS_SECRET_ACCESS_KEY=customer-secret", "AWS_DEFAULT_REGION=us-east-1", "AWS_CONFIG_FILE=/dev/null",
			"AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_PAGER=", "AWS_MAX_ATTEMPTS=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ext := "relay-cli-0123456789abcdef"
	if out := run("iam", "create-role", "--role-name", "mercamap-delivery", "--assume-role-policy-document", trustFor(ext)); !strings.Contains(out, `"Arn": "arn:aws:iam::111122223333:role/mercamap-delivery"`) ||
		!strings.Contains(out, `"sts:ExternalId": "`+ext+`"`) {
		t.Fatalf("the AWS CLI's create-role printed %s", out)
	}
	run("iam", "put-role-policy", "--role-name", "mercamap-delivery", "--policy-name", "relay-put-events", "--policy-document", allow("events:PutEvents", busARN))
	sess, err := b.session(t, role, ext)
	if err != nil {
		t.Fatalf("AssumeRole of the role the AWS CLI made: %v", err)
	}
	if err := b.putEvent(t, sess, busARN); err != nil {
		t.Fatalf("PutEvents the AWS CLI's policy allows: %v", err)
	}
	if err := b.putEvent(t, sess, "arn:aws:events:us-east-1:111122223333:event-bus/other"); errorCode(err) != "AccessDeniedException" {
		t.Fatalf("PutEvents on another bus: %v; want AccessDeniedException", err)
	}
}

// TestCardLinesAreTheCardsCommands: `sandbox card aws_cli` prints the card's commands as
// they are, quotes and all, each ended by a NUL; a card without them prints nothing.
func TestCardLinesAreTheCardsCommands(t *testing.T) {
	cmds := []string{"aws iam create-role --role-name r --assume-role-policy-document " + shellQuote(trustFor("relay-x")),
		"aws iam put-role-policy --role-name r --policy-name p --policy-document '" + `{"it's":"quoted"}` + "'"}
	card, _ := json.Marshal(map[string]any{"id": "orders-bus", "setup": map[string]any{"aws_cli": cmds, "quick_create_url": nil}})
	var out, errs bytes.Buffer
	if code := cardLines([]string{"aws_cli"}, bytes.NewReader(card), &out, &errs); code != 0 || out.String() != cmds[0]+"\x00"+cmds[1]+"\x00" {
		t.Fatalf("sandbox card aws_cli: exit %d, printed %q %s", code, out.String(), errs.String())
	}
	out.Reset()
	if code := cardLines([]string{"aws_cli"}, strings.NewReader(`{"setup":{"principal_arn":"x"}}`), &out, &errs); code != 0 || out.Len() != 0 {
		t.Fatalf("a card without aws_cli: exit %d, printed %q", code, out.String())
	}
	if code := cardLines([]string{"aws_cli"}, strings.NewReader(`not json`), &out, &errs); code == 0 {
		t.Fatal("a body that is not a card was taken")
	}
}
