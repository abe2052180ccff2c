package destination

import "encoding/json"

// DefaultName is identity.name when the config leaves it out.
const DefaultName = "mercamap"

// Identity is ours: the deployment-wide name (EventBridge source com.<name>, STS session
// <name>-<account>, label <name>-account) and the principals customers grant access to.
// AWSTemplateURL is identity.aws_template_url: where the operator published the
// connectors' parameterised templates ({connector} in it names which), for the cards'
// quick-create links; "" when not published.
type Identity struct{ Name, AWSPrincipalARN, GCPServiceAccount, AWSTemplateURL string }

// NameOrDefault is id.Name, or DefaultName when it is empty.
func (id Identity) NameOrDefault() string {
	if id.Name == "" {
		return DefaultName
	}
	return id.Name
}

// LabelKey is the Pub/Sub topic label that names the account owning the topic.
func LabelKey(name string) string { return name + "-account" }

// PolicyVersion is the IAM policy language version every policy here uses.
const PolicyVersion = "2012-10-17"

// PolicyDocument is an IAM policy. Its fields marshal in a fixed order, and Condition's
// maps with sorted keys, so the same destination always yields the same bytes.
type PolicyDocument struct {
	Version   string      `json:"Version"`
	Statement []Statement `json:"Statement"`
}

// Statement is one IAM policy statement.
type Statement struct {
	Effect    string     `json:"Effect"`
	Principal *Principal `json:"Principal,omitempty"`
	Action    string     `json:"Action"`
	Resource  string     `json:"Resource,omitempty"`
	Condition Condition  `json:"Condition,omitempty"`
}

// Principal names who a trust policy lets in.
type Principal struct {
	AWS string `json:"AWS"`
}

// Condition maps an operator (StringEquals) to condition keys and their values.
type Condition map[string]map[string]string

// JSON is the policy as compact JSON.
func (p PolicyDocument) JSON() string {
	b, err := json.Marshal(p)
	if err != nil {
		panic("destination: policy: " + err.Error()) // strings only: cannot fail
	}
	return string(b)
}

// TrustPolicy lets only principalARN assume the customer's role, and only with exactly
// externalID: the ExternalId is what stops another customer of ours naming this role.
func TrustPolicy(principalARN, externalID string) PolicyDocument {
	return PolicyDocument{Version: PolicyVersion, Statement: []Statement{{
		Effect:    "Allow",
		Principal: &Principal{AWS: principalARN},
		Action:    "sts:AssumeRole",
		Condition: Condition{"StringEquals": {"sts:ExternalId": externalID}},
	}}}
}

// writeStatement allows d's one write and nothing else; ok is false for a non-AWS d.
func writeStatement(d Destination) (Statement, bool) {
	switch d.Connector {
	case EventBridge:
		return Statement{Effect: "Allow", Action: "events:PutEvents", Resource: d.BusARN}, true
	case Kinesis:
		return Statement{Effect: "Allow", Action: "kinesis:PutRecord", Resource: d.StreamARN}, true
	}
	return Statement{}, false
}

// PermissionsPolicy allows events:PutEvents on d's bus, or kinesis:PutRecord on d's
// stream, and nothing else. It has no statement for a non-AWS destination.
func PermissionsPolicy(d Destination) PolicyDocument {
	p := PolicyDocument{Version: PolicyVersion, Statement: []Statement{}}
	if s, ok := writeStatement(d); ok {
		p.Statement = append(p.Statement, s)
	}
	return p
}

// KMSStatement allows kms:GenerateDataKey on a Kinesis stream's customer key, only when
// Kinesis asks for it in the stream's region; nil when d has no key.
func KMSStatement(d Destination) *Statement {
	if d.Connector != Kinesis || d.KMSKeyARN == "" {
		return nil
	}
	region := ""
	if a, err := ParseARN(d.StreamARN); err == nil {
		region = a.Region
	} else if a, err := ParseARN(d.KMSKeyARN); err == nil {
		region = a.Region
	}
	return &Statement{
		Effect:    "Allow",
		Action:    "kms:GenerateDataKey",
		Resource:  d.KMSKeyARN,
		Condition: Condition{"StringEquals": {"kms:ViaService": "kinesis." + region + ".amazonaws.com"}},
	}
}

// Setup returns the card's "setup" for d: for AWS, our principal, the trust policy for
// externalID, the permissions policy and the KMS statement (nil unless d has a key), and
// the role they make in three forms built from them: a CloudFormation template, a
// Terraform snippet and the AWS CLI commands, with the quick-create link when the
// identity names where the templates are (else nil); for Pub/Sub, our service account,
// the three gcloud commands that grant and label the topic, and their Terraform.
func Setup(d Destination, id Identity, externalID string) map[string]any {
	switch {
	case d.Connector.IsAWS():
		m := map[string]any{
			"principal_arn":      id.AWSPrincipalARN,
			"trust_policy":       TrustPolicy(id.AWSPrincipalARN, externalID),
			"permissions_policy": PermissionsPolicy(d),
			"kms_statement":      nil, // an untyped nil, so it reads and marshals as null
			"cloudformation":     CloudFormation(d, id, externalID),
			"terraform":          Terraform(d, id, externalID),
			"aws_cli":            AWSCLI(d, id, externalID),
			"quick_create_url":   nil,
		}
		if s := KMSStatement(d); s != nil {
			m["kms_statement"] = s
		}
		if u, ok := QuickCreateURL(d, id, externalID); ok {
			m["quick_create_url"] = u
		}
		return m
	case d.Connector == PubSub:
		return map[string]any{
			"service_account": id.GCPServiceAccount,
			"commands":        PubSubCommands(d, id),
			"terraform":       PubSubTerraform(d, id),
		}
	}
	return map[string]any{}
}

// PubSubCommands are the gcloud commands a customer runs: grant our service account
// publisher and viewer (the viewer role lets us read the label) on the topic, and label
// the topic with the account it belongs to.
func PubSubCommands(d Destination, id Identity) []string {
	grant := func(role string) string {
		return "gcloud pubsub topics add-iam-policy-binding " + d.TopicID + " --project=" + d.ProjectID +
			" --member=serviceAccount:" + id.GCPServiceAccount + " --role=" + role
	}
	return []string{
		grant("roles/pubsub.publisher"),
		grant("roles/pubsub.viewer"),
		"gcloud pubsub topics update " + d.TopicID + " --project=" + d.ProjectID +
			" --update-labels=" + LabelKey(id.NameOrDefault()) + "=" + d.Account,
	}
}

// SessionPolicy is the session policy for the one write: the permissions policy's
// statement plus the KMS statement when d has a key (the role's policy, RolePolicy). It caps the assumed session even if
// the customer's role allows more. A destination with no AWS write gets DenyAllPolicy.
func SessionPolicy(d Destination) string {
	p := RolePolicy(d)
	if len(p.Statement) == 0 {
		return DenyAllPolicy()
	}
	return p.JSON()
}

// DenyAllPolicy is the probe's session policy: it allows nothing, so even a role that
// wrongly lets the probe in hands out credentials that can do nothing.
func DenyAllPolicy() string {
	return PolicyDocument{Version: PolicyVersion, Statement: []Statement{
		{Effect: "Deny", Action: "*", Resource: "*"},
	}}.JSON()
}
