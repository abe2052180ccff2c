package destination

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/mercamap/relay/internal/destination/setuptest"
)

// The card's three forms of the customer's role (CloudFormation, Terraform, AWS CLI) and
// its quick-create link, read back by the tools customers use on them (setuptest): each
// must carry exactly the card's JSON policies.

var formsIdentity = Identity{Name: "mercamap", AWSPrincipalARN: "arn:aws:iam::999999999999:role/relay-delivery",
	GCPServiceAccount: "relay@relay-prod.iam.gserviceaccount.com",
	AWSTemplateURL:    "https://relay-templates.s3.us-east-1.amazonaws.com/v1/{connector}.yaml"}

const formsExternalID = "relay-0123456789abcdef0123456789abcdef"

// formCase is one AWS destination whose card's forms are checked.
type formCase struct {
	name string
	d    Destination
}

func formCases() []formCase {
	return []formCase{
		{"eventbridge", Destination{ID: "orders-bus", Account: "acct_1", Connector: EventBridge,
			BusARN:  "arn:aws:events:us-east-1:111122223333:event-bus/orders",
			RoleARN: "arn:aws:iam::111122223333:role/mercamap-delivery"}},
		{"eventbridge, a role with a path", Destination{ID: "billing.bus+2", Account: "acct_2", Connector: EventBridge,
			BusARN:  "arn:aws:events:eu-central-1:444455556666:event-bus/billing/events",
			RoleARN: "arn:aws:iam::444455556666:role/integrations/relay/mercamap-writer"}},
		{"kinesis", Destination{ID: "orders-stream", Account: "acct_1", Connector: Kinesis,
			StreamARN: "arn:aws:kinesis:eu-west-1:111122223333:stream/orders",
			RoleARN:   "arn:aws:iam::111122223333:role/mercamap-kinesis"}},
		{"kinesis with a KMS key", Destination{ID: "orders-stream-kms", Account: "acct_1", Connector: Kinesis,
			StreamARN: "arn:aws:kinesis:ap-southeast-2:111122223333:stream/orders.enc",
			RoleARN:   "arn:aws:iam::111122223333:role/team/mercamap-kinesis",
			KMSKeyARN: "arn:aws:kms:ap-southeast-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"}},
	}
}

func pubsubCase() Destination {
	return Destination{ID: "orders-topic", Account: "acct_1", Connector: PubSub, ProjectID: "acme-prod", TopicID: "relay-events"}
}

// cardSetup is the card's setup for d as the API serves it (JSON, decoded).
func cardSetup(t *testing.T, d Destination, id Identity) map[string]any {
	t.Helper()
	return setuptest.Setup(t, Setup(d, id, formsExternalID))
}

func formsRole(t *testing.T, d Destination) setuptest.Role {
	return setuptest.RoleOf(t, d.RoleARN, RolePolicyName(formsIdentity))
}

// TestTheCardShowsTheFormsOfItsConnector: an AWS card's setup has the template, the
// Terraform, the CLI commands and the quick-create link (null without
// identity.aws_template_url); the KMS statement is in the template and the Terraform
// exactly when the card shows it; a Pub/Sub card has its Terraform beside the gcloud
// commands and nothing of AWS.
func TestTheCardShowsTheFormsOfItsConnector(t *testing.T) {
	for _, c := range formCases() {
		s := cardSetup(t, c.d, formsIdentity)
		for _, k := range []string{"cloudformation", "terraform", "quick_create_url"} {
			if v, ok := s[k].(string); !ok || v == "" {
				t.Errorf("%s: setup.%s = %#v, want a string", c.name, k, s[k])
			}
		}
		if cli, ok := s["aws_cli"].([]any); !ok || len(cli) != 2 {
			t.Errorf("%s: setup.aws_cli = %#v, want two commands", c.name, s["aws_cli"])
		}
		withKMS := s["kms_statement"] != nil
		if withKMS != (c.d.KMSKeyARN != "") {
			t.Errorf("%s: kms_statement %v", c.name, s["kms_statement"])
		}
		for _, k := range []string{"cloudformation", "terraform"} {
			if strings.Contains(s[k].(string), "kms:GenerateDataKey") != withKMS {
				t.Errorf("%s: setup.%s names kms:GenerateDataKey: %v, the card shows the KMS statement: %v", c.name, k, !withKMS, withKMS)
			}
		}
		none := formsIdentity
		none.AWSTemplateURL = ""
		s = cardSetup(t, c.d, none)
		if v, ok := s["quick_create_url"]; !ok || v != nil {
			t.Errorf("%s: without identity.aws_template_url, quick_create_url = %#v (present: %v), want null", c.name, v, ok)
		}
	}
	s := cardSetup(t, pubsubCase(), formsIdentity)
	if tf, ok := s["terraform"].(string); !ok || !strings.Contains(tf, "google_pubsub_topic_iam_member") {
		t.Errorf("pubsub: setup.terraform = %#v", s["terraform"])
	}
	for _, k := range []string{"cloudformation", "aws_cli", "quick_create_url", "trust_policy"} {
		if _, ok := s[k]; ok {
			t.Errorf("pubsub: setup has %s", k)
		}
	}
}

// TestTheFormsMakeTheCardsRole: for each connector, with and without a KMS key, a role
// with and without a path: goformation reads the card's template, hcl its Terraform and
// /bin/sh its AWS CLI commands, and each makes the role role_arn names with exactly the
// card's trust policy and its permissions policy (with the KMS statement when shown).
func TestTheFormsMakeTheCardsRole(t *testing.T) {
	for _, c := range formCases() {
		setuptest.CheckForms(t, c.name, cardSetup(t, c.d, formsIdentity), formsRole(t, c.d))
	}
}

// TestTheQuickCreateLinkMakesTheCardsRole: the card's quick-create link opens the
// CloudFormation console in the bus's or stream's region on the connector's template
// (identity.aws_template_url with {connector} filled in), with the stack name and this
// destination's values as the parameters; goformation, given the connector's
// parameterised template (relay setup-template) with the link's values, makes exactly
// the card's role and policies.
func TestTheQuickCreateLinkMakesTheCardsRole(t *testing.T) {
	for _, c := range formCases() {
		body, err := SetupTemplate(c.d.Connector)
		if err != nil {
			t.Fatal(err)
		}
		role := formsRole(t, c.d)
		q := setuptest.CheckQuickCreate(t, c.name, cardSetup(t, c.d, formsIdentity), body, role)
		target, _ := ParseARN(c.d.BusARN + c.d.StreamARN)
		if q.Region != target.Region {
			t.Errorf("%s: region %q, want %q", c.name, q.Region, target.Region)
		}
		if want := "https://relay-templates.s3.us-east-1.amazonaws.com/v1/" + string(c.d.Connector) + ".yaml"; q.TemplateURL != want {
			t.Errorf("%s: templateURL %q, want %q", c.name, q.TemplateURL, want)
		}
		if q.StackName != StackName(c.d, formsIdentity) {
			t.Errorf("%s: stackName %q", c.name, q.StackName)
		}
		want := map[string]string{ParamRoleName: role.Name, ParamRolePath: role.Path, ParamExternalID: formsExternalID,
			ParamRelayPrincipalARN: formsIdentity.AWSPrincipalARN, ParamPolicyName: role.PolicyName}
		if c.d.Connector == EventBridge {
			want[ParamBusARN] = c.d.BusARN
		} else {
			want[ParamStreamARN] = c.d.StreamARN
			if c.d.KMSKeyARN != "" {
				want[ParamKMSKeyARN] = c.d.KMSKeyARN
			}
		}
		if !reflect.DeepEqual(q.Params, want) {
			t.Errorf("%s: the link's parameters %v, want %v", c.name, q.Params, want)
		}
	}
}

// TestStackNamesAreWhatCloudFormationTakes: a stack name is letters, digits and '-',
// a letter first, at most 128, whatever the destination's id holds.
func TestStackNamesAreWhatCloudFormationTakes(t *testing.T) {
	for _, id := range []string{"orders-bus", "billing.bus+2", "a_b", strings.Repeat("x", 200)} {
		s := StackName(Destination{ID: id}, Identity{Name: "merca_map"})
		if len(s) > 128 || strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" || s[0] != 'm' {
			t.Errorf("%q → %q", id, s)
		}
	}
}

// TestSetupTemplateIsOnlyForAWS: there is no setup template for pubsub.
func TestSetupTemplateIsOnlyForAWS(t *testing.T) {
	if _, err := SetupTemplate(PubSub); err == nil {
		t.Error("SetupTemplate(pubsub): no error")
	}
}

// TestTheTemplatesPassCfnLint: cfn-lint validates each card's template and each
// connector's parameterised template with no error and no warning.
func TestTheTemplatesPassCfnLint(t *testing.T) {
	templates := map[string]string{}
	for _, c := range formCases() {
		templates[c.name] = CloudFormation(c.d, formsIdentity, formsExternalID)
	}
	for _, c := range []Connector{EventBridge, Kinesis} {
		body, err := SetupTemplate(c)
		if err != nil {
			t.Fatal(err)
		}
		templates["setup-template "+string(c)] = body
	}
	setuptest.Lint(t, templates)
}

// TestThePubSubTerraformDoesWhatTheGcloudCommandsDo: hcl parses the Pub/Sub card's
// Terraform: publisher and viewer for our service account on the topic the gcloud
// commands name, and the label on the topic, which the import block adopts by its id.
func TestThePubSubTerraformDoesWhatTheGcloudCommandsDo(t *testing.T) {
	d := pubsubCase()
	s := cardSetup(t, d, formsIdentity)
	body := setuptest.ParseHCL(t, "pubsub", s["terraform"].(string))
	label := resourceLabel(d, formsIdentity)
	resources := setuptest.Blocks(body, "resource")
	if len(resources) != 3 {
		t.Errorf("resources %v, want two IAM members and the topic", resources)
	}
	member := "serviceAccount:" + formsIdentity.GCPServiceAccount
	commands := strings.Join(PubSubCommands(d, formsIdentity), "\n")
	for suffix, role := range map[string]string{"publisher": "roles/pubsub.publisher", "viewer": "roles/pubsub.viewer"} {
		b := resources["google_pubsub_topic_iam_member."+label+"_"+suffix]
		if b == nil {
			t.Fatalf("no google_pubsub_topic_iam_member %s_%s", label, suffix)
		}
		got := [4]string{setuptest.EvalString(t, b, "project"), setuptest.EvalString(t, b, "topic"),
			setuptest.EvalString(t, b, "role"), setuptest.EvalString(t, b, "member")}
		if want := [4]string{d.ProjectID, d.TopicID, role, member}; got != want {
			t.Errorf("%s: %v, want %v", suffix, got, want)
		}
		if !strings.Contains(commands, "--project="+d.ProjectID+" --member="+member+" --role="+role) {
			t.Errorf("the gcloud commands do not grant %s to %s:\n%s", role, member, commands)
		}
	}
	topic := resources["google_pubsub_topic."+label]
	if topic == nil {
		t.Fatal("no google_pubsub_topic")
	}
	if setuptest.EvalString(t, topic, "project") != d.ProjectID || setuptest.EvalString(t, topic, "name") != d.TopicID {
		t.Errorf("topic %s/%s", setuptest.EvalString(t, topic, "project"), setuptest.EvalString(t, topic, "name"))
	}
	labels, diags := topic.Body.Attributes["labels"].Expr.Value(nil)
	key := LabelKey(formsIdentity.NameOrDefault())
	if diags.HasErrors() || !labels.Type().IsObjectType() || labels.LengthInt() != 1 || labels.GetAttr(key).AsString() != d.Account {
		t.Errorf("labels = %#v (%v), want {%s = %s}", labels, diags, key, d.Account)
	}
	if !strings.Contains(commands, "--update-labels="+key+"="+d.Account) {
		t.Errorf("the gcloud commands do not label the topic %s=%s", key, d.Account)
	}
	var imports []*hclsyntax.Block
	for _, b := range body.Blocks {
		if b.Type == "import" {
			imports = append(imports, b)
		}
	}
	if len(imports) != 1 || setuptest.Traversal(t, imports[0], "to") != "google_pubsub_topic."+label ||
		setuptest.EvalString(t, imports[0], "id") != "projects/"+d.ProjectID+"/topics/"+d.TopicID {
		t.Errorf("want one import of the topic into google_pubsub_topic.%s", label)
	}
	if !strings.Contains(s["terraform"].(string), "\n# Terraform sets a topic's labels only on its google_pubsub_topic resource.") {
		t.Error("no comment line says where Terraform sets a topic's labels")
	}
}

// TestHCLStringsReadBackAsWritten: what hclString writes, hcl reads back as the same
// string: quotes, backslashes, newlines and what would start a template sequence.
func TestHCLStringsReadBackAsWritten(t *testing.T) {
	for _, s := range []string{"", "plain", `a "quoted" \ back\slash`, "two\nlines\ttab\r", "${var.x} and %{ if true }", "$${x}", "100%", "$", "\x01\x7f", "ünïcødé"} {
		src := "x = " + hclString(s) + "\n"
		body := setuptest.ParseHCL(t, "string", src)
		v, diags := body.Attributes["x"].Expr.Value(nil)
		if diags.HasErrors() || v.AsString() != s {
			t.Errorf("%q → %s → %#v (%v)", s, hclString(s), v, diags)
		}
	}
}

// TestShellQuoteKeepsEveryWordWhole: any word, once quoted, is one word to /bin/sh, as it was.
func TestShellQuoteKeepsEveryWordWhole(t *testing.T) {
	words := []string{"plain", "", "two words", "it's", `"double"`, "$HOME", "`id`", "$(id)", "a\nb", "*", "~root", "=zsh", "a;b|c&d", `back\slash`, "{}", "!x", "#c"}
	var line []string
	for _, w := range words {
		line = append(line, shellQuote(w))
	}
	if got := setuptest.ShellWords(t, strings.Join(line, " ")); !reflect.DeepEqual(got, words) {
		t.Errorf("sh splits %q into %q", strings.Join(line, " "), got)
	}
	if b, _ := json.Marshal(line); !strings.Contains(string(b), `"'=zsh'"`) {
		t.Errorf("a word starting with = is not quoted (zsh expands it): %s", b)
	}
}
