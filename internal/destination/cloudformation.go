package destination

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"go.yaml.in/yaml/v3"
)

// CloudFormation is the card's CloudFormation template (YAML) for d: one stack that
// creates the customer's role as d.RoleARN names it (its path too, when the ARN has
// one), with the card's trust policy for externalID as its trust relationship and
// RolePolicy(d) as its one inline policy, and outputs the role's ARN. "" for a non-AWS d.
func CloudFormation(d Destination, id Identity, externalID string) string {
	if !d.Connector.IsAWS() {
		return ""
	}
	name, path := RoleName(d)
	var pathNode *yaml.Node
	if path != "/" {
		pathNode = yamlQuoted(path)
	}
	return encodeTemplate(roleTemplate{
		comment: fmt.Sprintf("The IAM role the %[1]s relay assumes to write to %[2]s, for destination %[3]s.\n"+
			"Saved as role.yaml, it is created with:\n"+
			"  aws cloudformation deploy --template-file role.yaml --stack-name %[4]s --capabilities CAPABILITY_NAMED_IAM",
			id.NameOrDefault(), targetWords(d), d.ID, StackName(d, id)),
		description: fmt.Sprintf("%s relay: the role it assumes to write to %s (destination %s)", id.NameOrDefault(), targetWords(d), d.ID),
		roleName:    yamlQuoted(name), rolePath: pathNode, policyName: yamlQuoted(RolePolicyName(id)),
		trust:  policyNode(TrustPolicy(id.AWSPrincipalARN, externalID)),
		policy: policyNode(RolePolicy(d)),
	})
}

// targetWords names d's bus or stream in a sentence.
func targetWords(d Destination) string {
	if d.Connector == Kinesis {
		return "Kinesis stream " + targetARN(d)
	}
	return "EventBridge bus " + targetARN(d)
}

// The parameters of the connectors' parameterised templates (SetupTemplate), which the
// quick-create link (QuickCreateURL) fills in with a destination's values.
const (
	ParamRoleName          = "RoleName"
	ParamRolePath          = "RolePath"
	ParamPolicyName        = "PolicyName"
	ParamBusARN            = "BusArn"
	ParamStreamARN         = "StreamArn"
	ParamKMSKeyARN         = "KmsKeyArn"
	ParamExternalID        = "ExternalId"
	ParamRelayPrincipalARN = "RelayPrincipalArn"
)

// templateParam is one parameter of a parameterised template.
type templateParam struct {
	name, description, pattern string
	// def is the parameter's Default; hasDefault says there is one ("" may be it).
	def        string
	hasDefault bool
	// value is what the quick-create link fills in for d; an empty one is left to the
	// Default.
	value func(d Destination, id Identity, externalID string) string
}

// templateParams are c's parameterised template's parameters, in the order the
// CloudFormation console shows them.
func templateParams(c Connector) []templateParam {
	ps := []templateParam{
		{name: ParamRoleName, description: "The role's name: NAME in the role ARN you gave (arn:aws:iam::ACCOUNT:role/NAME)",
			pattern: `[\w+=,.@-]{1,64}`,
			value:   func(d Destination, _ Identity, _ string) string { name, _ := RoleName(d); return name }},
		{name: ParamRolePath, description: "The role's path: / unless the role ARN you gave has one (arn:aws:iam::ACCOUNT:role/PATH/NAME)",
			pattern: `/|/[\x21-\x7E]+/`, def: "/", hasDefault: true,
			value: func(d Destination, _ Identity, _ string) string { _, path := RoleName(d); return path }},
	}
	switch c {
	case EventBridge:
		ps = append(ps, templateParam{name: ParamBusARN, description: "The ARN of your event bus the relay writes to",
			pattern: `arn:aws:events:[a-z0-9-]+:[0-9]{12}:event-bus/[A-Za-z0-9._/-]+`,
			value:   func(d Destination, _ Identity, _ string) string { return d.BusARN }})
	case Kinesis:
		ps = append(ps, templateParam{name: ParamStreamARN, description: "The ARN of your Kinesis stream the relay writes to",
			pattern: `arn:aws:kinesis:[a-z0-9-]+:[0-9]{12}:stream/[A-Za-z0-9_.-]+`,
			value:   func(d Destination, _ Identity, _ string) string { return d.StreamARN }},
			templateParam{name: ParamKMSKeyARN, description: "The ARN of the stream's customer-managed KMS key; empty when the stream has none",
				hasDefault: true,
				value:      func(d Destination, _ Identity, _ string) string { return d.KMSKeyARN }})
	}
	return append(ps,
		templateParam{name: ParamExternalID, description: "The ExternalId on the destination's card",
			pattern: strings.TrimSuffix(strings.TrimPrefix(externalIDForm.String(), "^"), "$"),
			value:   func(_ Destination, _ Identity, ext string) string { return ext }},
		templateParam{name: ParamRelayPrincipalARN, description: "The relay's principal on the destination's card, the only one the role trusts",
			pattern: `arn:aws:iam::[0-9]{12}:(role|user)/[\x21-\x7E]+`,
			value:   func(_ Destination, id Identity, _ string) string { return id.AWSPrincipalARN }},
		templateParam{name: ParamPolicyName, description: "The name of the role's inline policy",
			pattern: `[\w+=,.@-]{1,128}`, def: RolePolicyName(Identity{}), hasDefault: true,
			value: func(_ Destination, id Identity, _ string) string { return RolePolicyName(id) }})
}

// condHasKMSKey is the Kinesis template's condition: a KMS key ARN was given.
const condHasKMSKey = "HasKmsKey"

// SetupTemplate is connector c's parameterised template (relay setup-template prints
// it): the role CloudFormation makes for any one destination of c, from the parameters
// the quick-create link fills in. Its policies are the card's, built by the same
// functions from placeholder values that it then replaces with the parameters (and, for
// the KMS statement's kinesis.REGION.amazonaws.com, the region of StreamArn). An error
// for a connector that is not AWS.
func SetupTemplate(c Connector) (string, error) {
	if !c.IsAWS() {
		return "", fmt.Errorf("%q has no setup template: eventbridge and kinesis have one", c)
	}
	ph := func(param string) string { return "@@" + param + "@@" }
	const region = "@@Region@@"
	d := Destination{Connector: c, BusARN: ph(ParamBusARN), KMSKeyARN: ph(ParamKMSKeyARN),
		StreamARN: "arn:aws:kinesis:" + region + ":000000000000:stream/" + ph(ParamStreamARN)}
	refs := map[string]*yaml.Node{
		ph(ParamBusARN): cfnRef(ParamBusARN), d.StreamARN: cfnRef(ParamStreamARN), ph(ParamKMSKeyARN): cfnRef(ParamKMSKeyARN),
		ph(ParamExternalID): cfnRef(ParamExternalID), ph(ParamRelayPrincipalARN): cfnRef(ParamRelayPrincipalARN),
	}
	var bad []string
	param := func(n *yaml.Node) *yaml.Node {
		if r, ok := refs[n.Value]; ok {
			return r
		}
		if strings.Contains(n.Value, region) { // the KMS statement's kms:ViaService
			return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!Sub", Content: []*yaml.Node{
				yamlQuoted(strings.ReplaceAll(n.Value, region, "${Region}")),
				yamlMap("Region", yamlFlow(&yaml.Node{Kind: yaml.SequenceNode, Tag: "!Select", Content: []*yaml.Node{
					{Kind: yaml.ScalarNode, Tag: "!!int", Value: "3"},
					yamlFlow(&yaml.Node{Kind: yaml.SequenceNode, Tag: "!Split", Content: []*yaml.Node{yamlQuoted(":"), cfnRef(ParamStreamARN)}}),
				}})),
			}}
		}
		if strings.Contains(n.Value, "@@") {
			bad = append(bad, n.Value)
		}
		return n
	}
	policy := replaceScalars(policyNode(PermissionsPolicy(d)), param)
	if kms := KMSStatement(d); kms != nil {
		statements := mappingValue(policy, "Statement")
		statements.Content = append(statements.Content, &yaml.Node{Kind: yaml.SequenceNode, Tag: "!If", Content: []*yaml.Node{
			yamlPlain(condHasKMSKey), replaceScalars(policyNode(*kms), param), cfnRef("AWS::NoValue"),
		}})
	}
	trust := replaceScalars(policyNode(TrustPolicy(ph(ParamRelayPrincipalARN), ph(ParamExternalID))), param)
	if len(bad) > 0 {
		panic("destination: setup template: placeholders left: " + strings.Join(bad, ", ")) // a new placeholder not mapped above
	}
	params := &yaml.Node{Kind: yaml.MappingNode}
	for _, p := range templateParams(c) {
		n := yamlMap("Type", yamlPlain("String"), "Description", yamlQuoted(p.description))
		if p.hasDefault {
			n.Content = append(n.Content, yamlPlain("Default"), yamlQuoted(p.def))
		}
		if p.pattern != "" {
			n.Content = append(n.Content, yamlPlain("AllowedPattern"), yamlQuoted(p.pattern))
		}
		params.Content = append(params.Content, yamlPlain(p.name), n)
	}
	var conditions *yaml.Node
	if c == Kinesis {
		conditions = yamlMap(condHasKMSKey, &yaml.Node{Kind: yaml.SequenceNode, Tag: "!Not", Style: yaml.FlowStyle, Content: []*yaml.Node{
			{Kind: yaml.SequenceNode, Tag: "!Equals", Style: yaml.FlowStyle, Content: []*yaml.Node{cfnRef(ParamKMSKeyARN), yamlQuoted("")}},
		}})
	}
	what := map[Connector]string{EventBridge: "an EventBridge bus", Kinesis: "a Kinesis stream"}[c]
	return encodeTemplate(roleTemplate{
		comment: "The IAM role a relay assumes to write to " + what + ", for one destination:\n" +
			"the parameters are on the destination's card (its quick-create link fills them in).\n" +
			"Operators: relay setup-template " + string(c) + " prints this file; upload it once and name\n" +
			"its URL in identity.aws_template_url (see the operator guide).",
		description: "The IAM role a relay assumes to write to " + what + ", trusting only the relay's principal with the destination's ExternalId",
		params:      params, conditions: conditions,
		roleName: cfnRef(ParamRoleName), rolePath: cfnRef(ParamRolePath), policyName: cfnRef(ParamPolicyName),
		trust: trust, policy: policy,
	}), nil
}

// QuickCreateURL is the CloudFormation console's quick-create link for d's role: the
// connector's parameterised template at identity.aws_template_url ({connector} replaced),
// in the region of d's bus or stream, with the stack name and every parameter filled in
// with d's values. ok is false when the identity names no template URL or d is not AWS.
func QuickCreateURL(d Destination, id Identity, externalID string) (u string, ok bool) {
	if id.AWSTemplateURL == "" || !d.Connector.IsAWS() {
		return "", false
	}
	region := ""
	if a, err := ParseARN(targetARN(d)); err == nil {
		region = a.Region
	}
	q := "templateURL=" + url.QueryEscape(TemplateURL(id.AWSTemplateURL, d.Connector)) +
		"&stackName=" + url.QueryEscape(StackName(d, id))
	for _, p := range templateParams(d.Connector) {
		if v := p.value(d, id, externalID); v != "" {
			q += "&param_" + p.name + "=" + url.QueryEscape(v)
		}
	}
	return "https://console.aws.amazon.com/cloudformation/home?region=" + url.QueryEscape(region) + "#/stacks/quickcreate?" + q, true
}

// ConnectorPlaceholder is what identity.aws_template_url holds where the connector's name
// goes: one URL names both connectors' templates.
const ConnectorPlaceholder = "{connector}"

// TemplateURL is where connector c's parameterised template is, from
// identity.aws_template_url.
func TemplateURL(templateURL string, c Connector) string {
	return strings.ReplaceAll(templateURL, ConnectorPlaceholder, string(c))
}

// targetARN is d's bus or stream ARN.
func targetARN(d Destination) string {
	if d.Connector == Kinesis {
		return d.StreamARN
	}
	return d.BusARN
}

// roleTemplate is what a template holds: the role, its policies and what makes them.
type roleTemplate struct {
	comment, description           string
	params, conditions             *yaml.Node // nil: none
	roleName, rolePath, policyName *yaml.Node // rolePath nil: none
	trust, policy                  *yaml.Node
}

// encodeTemplate is t as a CloudFormation template in YAML: the role (logical id Role)
// and the output RoleArn.
func encodeTemplate(t roleTemplate) string {
	role := yamlMap("RoleName", t.roleName)
	if t.rolePath != nil {
		role.Content = append(role.Content, yamlPlain("Path"), t.rolePath)
	}
	role.Content = append(role.Content,
		yamlPlain("AssumeRolePolicyDocument"), t.trust,
		yamlPlain("Policies"), &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{
			yamlMap("PolicyName", t.policyName, "PolicyDocument", t.policy),
		}})
	doc := yamlMap("AWSTemplateFormatVersion", yamlQuoted("2010-09-09"), "Description", yamlQuoted(t.description))
	if t.params != nil {
		doc.Content = append(doc.Content, yamlPlain("Parameters"), t.params)
	}
	if t.conditions != nil {
		doc.Content = append(doc.Content, yamlPlain("Conditions"), t.conditions)
	}
	doc.Content = append(doc.Content,
		yamlPlain("Resources"), yamlMap("Role", yamlMap("Type", yamlPlain("AWS::IAM::Role"), "Properties", role)),
		yamlPlain("Outputs"), yamlMap("RoleArn", yamlMap(
			"Description", yamlQuoted("The role's ARN: the role_arn of the destination"),
			"Value", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!GetAtt", Value: "Role.Arn"})),
	)
	doc.Content[0].HeadComment = t.comment
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		panic("destination: template: " + err.Error()) // nodes built here: cannot fail
	}
	_ = enc.Close()
	return b.String()
}

// policyNode is p as YAML nodes, keys in the order of its JSON (the card's), each value
// double-quoted so no YAML reader takes one for a date, a number or a boolean.
func policyNode(p any) *yaml.Node {
	b, err := json.Marshal(p)
	if err != nil {
		panic("destination: policy: " + err.Error()) // strings only: cannot fail
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil { // JSON is YAML
		panic("destination: policy: " + err.Error())
	}
	n := doc.Content[0]
	blockStyle(n)
	return n
}

// blockStyle makes n's collections block style and its mapping keys plain.
func blockStyle(n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		n.Style = 0
		for i, c := range n.Content {
			if i%2 == 0 {
				c.Style = 0
			} else {
				blockStyle(c)
			}
		}
	case yaml.SequenceNode:
		n.Style = 0
		for _, c := range n.Content {
			blockStyle(c)
		}
	}
}

// replaceScalars replaces each scalar value (not key) of n with what f makes of it.
func replaceScalars(n *yaml.Node, f func(*yaml.Node) *yaml.Node) *yaml.Node {
	switch n.Kind {
	case yaml.ScalarNode:
		return f(n)
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			n.Content[i] = replaceScalars(n.Content[i], f)
		}
	case yaml.SequenceNode:
		for i := range n.Content {
			n.Content[i] = replaceScalars(n.Content[i], f)
		}
	}
	return n
}

// mappingValue is the value of key in mapping m; nil when m has no such key.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// mapping is a block mapping of kv: keys (strings) and values (*yaml.Node) in turn.
func yamlMap(kv ...any) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Content = append(m.Content, yamlPlain(kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return m
}

func yamlPlain(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func yamlQuoted(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

// ref is CloudFormation's !Ref name.
func cfnRef(name string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!Ref", Value: name}
}

func yamlFlow(n *yaml.Node) *yaml.Node { n.Style = yaml.FlowStyle; return n }
