package destination

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Terraform is the card's Terraform snippet for d (HCL, as terraform fmt writes it): an
// aws_iam_role as d.RoleARN names it, its assume_role_policy the card's trust policy for
// externalID, an aws_iam_role_policy with RolePolicy(d), both as jsonencode of the card's
// JSON, and an output with the role's ARN. "" for a non-AWS d.
func Terraform(d Destination, id Identity, externalID string) string {
	if !d.Connector.IsAWS() {
		return ""
	}
	name, path := RoleName(d)
	label := resourceLabel(d, id)
	var w hclWriter
	w.comment(fmt.Sprintf("The IAM role the %s relay assumes to write to %s, for destination %s.", id.NameOrDefault(), targetWords(d), d.ID))
	w.open(0, `resource "aws_iam_role" `+hclString(label)+" {")
	w.attr(2, "name", hclString(name))
	if path != "/" {
		w.attr(2, "path", hclString(path))
	}
	w.jsonencode(2, "assume_role_policy", policyNode(TrustPolicy(id.AWSPrincipalARN, externalID)))
	w.close(0, "}")
	w.blank()
	w.open(0, `resource "aws_iam_role_policy" `+hclString(label)+" {")
	w.attr(2, "name", hclString(RolePolicyName(id)))
	w.attr(2, "role", "aws_iam_role."+label+".id")
	w.jsonencode(2, "policy", policyNode(RolePolicy(d)))
	w.close(0, "}")
	w.blank()
	w.comment("The role's ARN: the role_arn of the destination.")
	w.open(0, `output "`+label+`_role_arn" {`)
	w.attr(2, "value", "aws_iam_role."+label+".arn")
	w.close(0, "}")
	return w.String()
}

// PubSubTerraform is the Terraform for the card's three gcloud commands (PubSubCommands):
// two google_pubsub_topic_iam_member, publisher and viewer for our service account, and
// the topic's label, which Terraform sets only on the topic's own google_pubsub_topic
// resource: the snippet adopts the existing topic with an import block and says in a
// comment what to do when the customer's Terraform already manages it.
func PubSubTerraform(d Destination, id Identity) string {
	if d.Connector != PubSub {
		return ""
	}
	label := resourceLabel(d, id)
	var w hclWriter
	member := func(suffix, role string) {
		w.open(0, `resource "google_pubsub_topic_iam_member" `+hclString(label+"_"+suffix)+" {")
		w.attr(2, "project", hclString(d.ProjectID))
		w.attr(2, "topic", hclString(d.TopicID))
		w.attr(2, "role", hclString(role))
		w.attr(2, "member", hclString("serviceAccount:"+id.GCPServiceAccount))
		w.close(0, "}")
	}
	w.comment(fmt.Sprintf("The %s relay's service account may publish to topic %s of project %s, and read its labels.", id.NameOrDefault(), d.TopicID, d.ProjectID))
	member("publisher", "roles/pubsub.publisher")
	w.blank()
	member("viewer", "roles/pubsub.viewer")
	w.blank()
	key := LabelKey(id.NameOrDefault())
	w.comment(fmt.Sprintf("The label %s = %s says the topic is account %s's.", key, d.Account, d.Account))
	w.comment("Terraform sets a topic's labels only on its google_pubsub_topic resource. If your Terraform")
	w.comment("already manages this topic, add the label to that resource's labels and leave out the two")
	w.comment("blocks below. If not, the import block (Terraform 1.5 or later) adopts the existing topic:")
	w.comment("terraform plan must then show a change of its labels only; copy into the resource block")
	w.comment("any other setting plan would change.")
	w.open(0, "import {")
	w.attr(2, "to", "google_pubsub_topic."+label)
	w.attr(2, "id", hclString("projects/"+d.ProjectID+"/topics/"+d.TopicID))
	w.close(0, "}")
	w.blank()
	w.open(0, `resource "google_pubsub_topic" `+hclString(label)+" {")
	w.attr(2, "project", hclString(d.ProjectID))
	w.attr(2, "name", hclString(d.TopicID))
	w.value(2, "labels = ", yamlMap(key, yamlQuoted(d.Account)), "")
	w.close(0, "}")
	return w.String()
}

// hclWriter writes HCL lines as terraform fmt does: two spaces a level, and the = of
// consecutive one-line attributes aligned.
type hclWriter struct{ lines []hclLine }

// hclLine is one line: lead (its indentation, and its whole text when it is not a one-line
// attribute) and assign ("= value" of a one-line attribute, aligned with its neighbours').
type hclLine struct{ lead, assign string }

func (w *hclWriter) comment(s string) { w.lines = append(w.lines, hclLine{lead: "# " + s}) }
func (w *hclWriter) blank()           { w.lines = append(w.lines, hclLine{}) }
func (w *hclWriter) open(indent int, s string) {
	w.lines = append(w.lines, hclLine{lead: pad(indent) + s})
}
func (w *hclWriter) close(indent int, s string) { w.open(indent, s) }
func (w *hclWriter) attr(indent int, k, v string) {
	w.lines = append(w.lines, hclLine{pad(indent) + k, "= " + v})
}

// jsonencode writes key = jsonencode(v) with v as an HCL object.
func (w *hclWriter) jsonencode(indent int, key string, v *yaml.Node) {
	w.value(indent, key+" = jsonencode(", v, ")")
}

// value writes v (a policy's nodes: strings, mappings, sequences) after lead, and close
// after it: a string on one line, a mapping or a sequence over several.
func (w *hclWriter) value(indent int, lead string, v *yaml.Node, close string) {
	switch v.Kind {
	case yaml.MappingNode:
		w.open(indent, lead+"{")
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, val := hclKey(v.Content[i].Value), v.Content[i+1]
			if val.Kind == yaml.ScalarNode {
				w.attr(indent+2, k, hclString(val.Value))
			} else {
				w.value(indent+2, k+" = ", val, "")
			}
		}
		w.close(indent, "}"+close)
	case yaml.SequenceNode:
		w.open(indent, lead+"[")
		for _, item := range v.Content {
			w.value(indent+2, "", item, ",")
		}
		w.close(indent, "]"+close)
	default:
		w.open(indent, lead+hclString(v.Value)+close)
	}
}

// String is the lines, each run of one-line attributes with its = aligned.
func (w *hclWriter) String() string {
	var b strings.Builder
	for i := 0; i < len(w.lines); {
		j, width := i, 0
		for ; j < len(w.lines) && w.lines[j].assign != ""; j++ {
			width = max(width, len(w.lines[j].lead))
		}
		if j == i {
			b.WriteString(w.lines[i].lead + "\n")
			i++
			continue
		}
		for ; i < j; i++ {
			l := w.lines[i]
			b.WriteString(l.lead + pad(width-len(l.lead)+1) + l.assign + "\n")
		}
	}
	return b.String()
}

func pad(n int) string { return strings.Repeat(" ", n) }

var hclIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// hclKey is an object key: bare when it is an identifier, else a quoted string.
func hclKey(k string) string {
	if hclIdentifier.MatchString(k) && k != "null" && k != "true" && k != "false" {
		return k
	}
	return hclString(k)
}

// hclString is s as an HCL quoted string: escaped, and ${ and %{ doubled so nothing in
// it is read as a template sequence.
func hclString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '"':
			b.WriteString(`\"`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		case (r == '$' || r == '%') && strings.HasPrefix(s[i+1:], "{"):
			b.WriteRune(r)
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
