package api_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/destination/setuptest"
)

// TestADestinationMadeThroughTheAPIGetsItsRoleInOneStep is issue 55's Done-when: an
// EventBridge bus, a Kinesis stream without and one with a KMS key, each created through
// the API (POST), get a card (the create's answer, and GET after) whose CloudFormation
// template passes cfn-lint, whose Terraform parses (as terraform fmt writes it), and
// whose template, Terraform and AWS CLI commands carry exactly the card's trust policy
// and permissions policy (with the KMS statement when the card shows it), for the role
// role_arn names; with identity.aws_template_url set, the card's quick-create link opens
// the connector's template in the stream's or bus's region with this destination's
// values as its parameters, and that template (relay setup-template) makes the same role.
// Without the setting the link is null.
func TestADestinationMadeThroughTheAPIGetsItsRoleInOneStep(t *testing.T) {
	const templateURL = "https://relay-templates.s3.us-east-1.amazonaws.com/v3/{connector}.yaml"
	r := apitest.New(t, apitest.Options{Made: true, Config: func(c *config.Config) {
		c.Identity.AWSTemplateURL = templateURL
	}})
	policyName := destination.RolePolicyName(apitest.Identity)
	type made struct {
		name, connector, body, target, roleARN, kmsKeyARN string
	}
	cases := []made{
		{name: "eventbridge", connector: "eventbridge", target: "arn:aws:events:eu-west-1:111122223333:event-bus/orders-api",
			roleARN: "arn:aws:iam::111122223333:role/mercamap-events"},
		{name: "kinesis", connector: "kinesis", target: "arn:aws:kinesis:us-west-2:111122223333:stream/orders-api",
			roleARN: "arn:aws:iam::111122223333:role/integrations/mercamap-kinesis"},
		{name: "kinesis with a KMS key", connector: "kinesis", target: "arn:aws:kinesis:ap-northeast-1:111122223333:stream/enc",
			roleARN:   "arn:aws:iam::111122223333:role/mercamap-kinesis-kms",
			kmsKeyARN: "arn:aws:kms:ap-northeast-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"},
	}
	templates := map[string]string{}
	for _, c := range cases {
		field := map[string]string{"eventbridge": "bus_arn", "kinesis": "stream_arn"}[c.connector]
		body := fmt.Sprintf(`{"account":%q,%q:%q,"role_arn":%q`, apitest.Acct1, field, c.target, c.roleARN)
		if c.kmsKeyARN != "" {
			body += fmt.Sprintf(`,"kms_key_arn":%q`, c.kmsKeyARN)
		}
		base := r.URL + fmt.Sprintf(dests, c.connector)
		created := call(t, "POST", base, apitest.AdminToken, body+"}")
		if created.status != 201 {
			t.Fatalf("%s: create: %d %s", c.name, created.status, created.body)
		}
		card := created.json(t)
		got := call(t, "GET", base+"/"+url.PathEscape(card["id"].(string)), apitest.Acct1Token, "")
		if got.status != 200 {
			t.Fatalf("%s: GET: %d %s", c.name, got.status, got.body)
		}
		setup := setuptest.Setup(t, card["setup"])
		setuptest.SameJSON(t, c.name+": the created card's setup and GET's", got.json(t)["setup"], setup)
		if (setup["kms_statement"] != nil) != (c.kmsKeyARN != "") {
			t.Errorf("%s: kms_statement %v", c.name, setup["kms_statement"])
		}
		role := setuptest.RoleOf(t, c.roleARN, policyName)
		setuptest.CheckForms(t, c.name, setup, role)
		templates[c.name] = setup["cloudformation"].(string)

		param, err := destination.SetupTemplate(destination.Connector(c.connector))
		if err != nil {
			t.Fatal(err)
		}
		q := setuptest.CheckQuickCreate(t, c.name, setup, param, role)
		region := strings.Split(c.target, ":")[3]
		if q.Region != region || q.TemplateURL != strings.ReplaceAll(templateURL, "{connector}", c.connector) ||
			q.StackName != destination.StackName(destination.Destination{ID: card["id"].(string)}, apitest.Identity) {
			t.Errorf("%s: the link opens %s in %s as stack %s", c.name, q.TemplateURL, q.Region, q.StackName)
		}
		want := map[string]string{"RoleName": role.Name, "RolePath": role.Path, "ExternalId": card["external_id"].(string),
			"RelayPrincipalArn": apitest.Identity.AWSPrincipalARN, "PolicyName": policyName}
		if c.connector == "eventbridge" {
			want["BusArn"] = c.target
		} else {
			want["StreamArn"] = c.target
			if c.kmsKeyARN != "" {
				want["KmsKeyArn"] = c.kmsKeyARN
			}
		}
		setuptest.SameJSON(t, c.name+": the link's parameters", q.Params, want)
	}
	setuptest.Lint(t, templates)

	// The rig's own cards, without the setting: the link is null, the forms are there.
	plain := apitest.New(t, apitest.Options{})
	got := call(t, "GET", plain.URL+fmt.Sprintf(dests, "kinesis")+"/orders-stream", apitest.Acct1Token, "")
	setup := setuptest.Setup(t, got.json(t)["setup"])
	if v, ok := setup["quick_create_url"]; !ok || v != nil {
		t.Errorf("without identity.aws_template_url: quick_create_url = %#v (present: %v), want null", v, ok)
	}
	setuptest.CheckForms(t, "the rig's kinesis", setup, setuptest.RoleOf(t, apitest.Destinations()[1].RoleARN, policyName))
}
