package main

import (
	"testing"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
)

// TestSetupTemplatePrintsTheConnectorsTemplate: relay setup-template prints the
// connector's parameterised template (what the cards' quick-create links open; the
// destination package's tests lint it and read the card's policies back from it), and
// refuses a connector without one.
func TestSetupTemplatePrintsTheConnectorsTemplate(t *testing.T) {
	for _, c := range []destination.Connector{destination.EventBridge, destination.Kinesis} {
		want, err := destination.SetupTemplate(c)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := runRelay(t, nil, "", "setup-template", string(c)); err != nil || out != want {
			t.Errorf("setup-template %s: %v\n%s", c, err, out)
		}
	}
	for _, args := range [][]string{{"setup-template", "pubsub"}, {"setup-template"}, {"setup-template", "sqs"}} {
		if out, err := runRelay(t, nil, "", args...); err == nil {
			t.Errorf("%v: no error\n%s", args, out)
		}
	}
}

// TestANewTemplateURLNeedsNoRestart: identity.aws_template_url is the cards' alone, so a
// reload that changes it names nothing to restart (the cards show the new links at once);
// another change of the identity still does.
func TestANewTemplateURLNeedsNoRestart(t *testing.T) {
	old, next := &config.Config{}, &config.Config{}
	next.Identity.AWSTemplateURL = "https://b.s3.amazonaws.com/{connector}.yaml"
	if got := restartOnly(old, next); len(got) != 0 {
		t.Errorf("a new aws_template_url needs a restart of %v", got)
	}
	next.Identity.AWSPrincipalARN = "arn:aws:iam::999999999999:role/other"
	if got := restartOnly(old, next); len(got) != 1 {
		t.Errorf("a new principal: %v", got)
	}
}
