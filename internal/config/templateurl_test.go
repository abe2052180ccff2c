package config

import (
	"errors"
	"strings"
	"testing"
)

// TestTheTemplateURLIsAnHTTPSURLNamingTheConnector: identity.aws_template_url is optional;
// set, it is read into the identity (the cards' quick-create links), and refused unless
// it is an https URL with {connector} where eventbridge or kinesis goes.
func TestTheTemplateURLIsAnHTTPSURLNamingTheConnector(t *testing.T) {
	identity := func(u string) map[string]string {
		return map[string]string{"identity": `identity: {aws_principal_arn: "arn:aws:iam::999999999999:role/relay-delivery", gcp_service_account: relay@relay-prod.iam.gserviceaccount.com, aws_template_url: "` + u + `"}`}
	}
	good := "https://relay-templates.s3.us-east-1.amazonaws.com/v1/{connector}.yaml"
	c, err := Parse([]byte(doc(identity(good))), env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Identity.AWSTemplateURL != good {
		t.Errorf("identity.aws_template_url read as %q", c.Identity.AWSTemplateURL)
	}
	if c, err := Parse([]byte(doc(nil)), env(nil), nil); err != nil || c.Identity.AWSTemplateURL != "" {
		t.Errorf("without it: %q, %v", c.Identity.AWSTemplateURL, err)
	}
	for u, want := range map[string]string{
		"http://relay-templates.s3.amazonaws.com/{connector}.yaml":       "must be the https URL",
		"https://relay-templates.s3.amazonaws.com/eventbridge.yaml":      "names no {connector}",
		"relay-templates/{connector}.yaml":                               "must be the https URL",
		"https:///{connector}.yaml":                                      "must be the https URL",
		"https://user:pw@relay-templates.s3.amazonaws.com/{connector}":   "must be the https URL",
		"https://relay-templates.s3.amazonaws.com/{connector}.yaml#frag": "must be the https URL",
	} {
		_, err := Parse([]byte(doc(identity(u))), env(nil), nil)
		var ps Problems
		if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Path != "identity.aws_template_url" || !strings.Contains(ps[0].Message, want) {
			t.Errorf("%s: %v, want identity.aws_template_url: …%s…", u, err, want)
		}
	}
}
