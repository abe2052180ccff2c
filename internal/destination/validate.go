package destination

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a destination: the field it is about (as the config
// names it: "bus_arn", "events[1]") and a sentence an operator can act on.
type Problem struct{ Field, Message string }

// arnKind describes what one ARN field must name.
type arnKind struct {
	field    string // config key
	what     string // "an EventBridge event bus"
	service  string
	regional bool // IAM ARNs have no region; the others must
	resource *regexp.Regexp
	shape    string // the resource's expected shape, for messages
	example  string
}

var (
	busKind = arnKind{field: "bus_arn", what: "an EventBridge event bus", service: "events", regional: true,
		resource: regexp.MustCompile(`^event-bus/[A-Za-z0-9._/-]{1,256}$`), shape: "event-bus/NAME",
		example: "arn:aws:events:us-east-1:111122223333:event-bus/orders"}
	streamKind = arnKind{field: "stream_arn", what: "a Kinesis stream", service: "kinesis", regional: true,
		resource: regexp.MustCompile(`^stream/[A-Za-z0-9_.-]{1,128}$`), shape: "stream/NAME",
		example: "arn:aws:kinesis:eu-west-1:111122223333:stream/orders"}
	roleKind = arnKind{field: "role_arn", what: "an IAM role", service: "iam",
		resource: regexp.MustCompile(`^role/(?:[A-Za-z0-9+=,.@_-]+/)*[A-Za-z0-9+=,.@_-]{1,64}$`), shape: "role/NAME (a path before NAME is allowed)",
		example: "arn:aws:iam::111122223333:role/mercamap-delivery"}
	kmsKind = arnKind{field: "kms_key_arn", what: "a KMS key", service: "kms", regional: true,
		resource: regexp.MustCompile(`^key/(?:mrk-[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$`), shape: "key/KEY-ID",
		example: "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"}
)

const partitionRefused = "only the aws partition (GovCloud and China regions are refused)"

// check parses value as this kind of ARN and returns it with every problem found. ok is
// true when nothing was wrong, so cross-field checks may rely on its account and region.
func (k arnKind) check(value string) (a ARN, problems []Problem, ok bool) {
	add := func(format string, args ...any) {
		problems = append(problems, Problem{k.field, fmt.Sprintf(format, args...)})
	}
	a, err := ParseARN(value)
	if err != nil {
		add("%s is %v: it must be the ARN of %s, like %s", k.field, err, k.what, k.example)
		return ARN{}, problems, false
	}
	partitionOK := a.Partition == Partition
	if !partitionOK {
		add("partition %s is not supported: %s", a.Partition, partitionRefused)
	}
	if a.Service != k.service {
		add("this is an ARN of the %s service, not of %s: expected arn:aws:%s:…, like %s", a.Service, k.what, k.service, k.example)
	}
	switch {
	case !k.regional && a.Region != "":
		add("an IAM role ARN has no region (arn:aws:iam::ACCOUNT:role/NAME): remove %s", a.Region)
	case k.regional && partitionOK: // a refused partition already says why its region is refused
		if msg := CheckRegion(a.Region); msg != "" {
			add("%s", msg)
		}
	}
	if !IsAccountID(a.AccountID) {
		if a.AccountID == "" {
			add("the AWS account id is missing: the ARN of %s names its 12-digit account, like %s", k.what, k.example)
		} else {
			add("account %s is not a 12-digit AWS account id", a.AccountID)
		}
	}
	if a.Service == k.service && !k.resource.MatchString(a.Resource) {
		switch {
		case k.service == "kms" && strings.HasPrefix(a.Resource, "alias/"):
			add("this ARN names a KMS alias: use the key's own ARN (…:key/KEY-ID), which an alias can be moved away from")
		default:
			add("resource %q is not %s: expected %s", a.Resource, k.what, k.shape)
		}
	}
	return a, problems, len(problems) == 0
}

var (
	projectChars = regexp.MustCompile(`^[a-z0-9-]*$`)
	topicChars   = regexp.MustCompile(`^[A-Za-z0-9\-_.~+%]*$`)
	eventType    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	userResource = regexp.MustCompile(`^user/(?:[A-Za-z0-9+=,.@_-]+/)*[A-Za-z0-9+=,.@_-]{1,64}$`)
)

// Validate returns every problem with d's target as (field, message) pairs, the field
// named as the config names it. The id and account are the config's to check.
func (d Destination) Validate() []Problem {
	var ps []Problem
	add := func(field, format string, args ...any) {
		ps = append(ps, Problem{field, fmt.Sprintf(format, args...)})
	}
	unused := func(field, value string) {
		if value != "" {
			add(field, "%s is not used by the %s connector: remove it, or change the connector", field, d.Connector)
		}
	}
	required := func(field, value, what string) bool {
		if value == "" {
			add(field, "%s is required by the %s connector: %s", field, d.Connector, what)
			return false
		}
		return true
	}

	switch d.Connector {
	case EventBridge, Kinesis:
		target, targetKind := d.BusARN, busKind
		if d.Connector == Kinesis {
			target, targetKind = d.StreamARN, streamKind
		}
		var t, role ARN
		var tOK, roleOK bool
		if required(targetKind.field, target, "the ARN of "+targetKind.what+", like "+targetKind.example) {
			var tp []Problem
			t, tp, tOK = targetKind.check(target)
			ps = append(ps, tp...)
		}
		if required("role_arn", d.RoleARN, "the ARN of the customer's IAM role the relay assumes, like "+roleKind.example) {
			var rp []Problem
			role, rp, roleOK = roleKind.check(d.RoleARN)
			ps = append(ps, rp...)
		}
		if tOK && roleOK && t.AccountID != role.AccountID {
			add(targetKind.field, "%s is in AWS account %s but the role is in account %s: it must be in the role's account", targetKind.what, t.AccountID, role.AccountID)
		}
		if d.Connector == Kinesis && d.KMSKeyARN != "" {
			k, kp, kOK := kmsKind.check(d.KMSKeyARN)
			ps = append(ps, kp...)
			if kOK && roleOK && k.AccountID != role.AccountID {
				add("kms_key_arn", "the KMS key is in AWS account %s but the role is in account %s: it must be in the role's account", k.AccountID, role.AccountID)
			}
			if kOK && tOK && k.Region != t.Region {
				add("kms_key_arn", "the KMS key is in region %s but the stream is in %s: a stream's key must be in the stream's region", k.Region, t.Region)
			}
		}
		if d.Connector == EventBridge {
			unused("stream_arn", d.StreamARN)
			unused("kms_key_arn", d.KMSKeyARN)
		} else {
			unused("bus_arn", d.BusARN)
		}
		unused("project_id", d.ProjectID)
		unused("topic_id", d.TopicID)
		if d.PinnedExternalID != "" {
			if msg := CheckExternalID(d.PinnedExternalID); msg != "" {
				add("external_id", "%s", msg)
			}
		}
	case PubSub:
		if required("project_id", d.ProjectID, "the Google Cloud project that holds the topic, like acme-prod") {
			if msg := checkProjectID(d.ProjectID); msg != "" {
				add("project_id", "%s", msg)
			}
		}
		if required("topic_id", d.TopicID, "the topic's id within its project, like relay-events") {
			if msg := checkTopicID(d.TopicID); msg != "" {
				add("topic_id", "%s", msg)
			}
		}
		unused("bus_arn", d.BusARN)
		unused("stream_arn", d.StreamARN)
		unused("role_arn", d.RoleARN)
		unused("kms_key_arn", d.KMSKeyARN)
		if d.PinnedExternalID != "" {
			add("external_id", "a pubsub destination has no ExternalId: remove external_id")
		}
	case "":
		add("connector", "connector is required: use eventbridge, kinesis or pubsub")
	default:
		add("connector", "unknown connector %q: use eventbridge, kinesis or pubsub", string(d.Connector))
	}

	// Zero is unset (the relay's default window, no cap): what is set must be in range.
	if d.InFlight != 0 {
		if msg := InFlightProblem(d.InFlight); msg != "" {
			add("in_flight", "%s", msg)
		}
	}
	if d.MaxRate != 0 {
		if msg := MaxRateProblem(d.MaxRate); msg != "" {
			add("max_rate", "%s", msg)
		}
	}

	for i, e := range d.Events {
		field := fmt.Sprintf("events[%d]", i)
		switch {
		case e == "":
			add(field, "an event type is empty: list short types like job.completed, or leave events out to receive all")
		case !eventType.MatchString(e):
			add(field, "event type %q is not a short type like job.completed (letters, digits, '.', '_' and '-')", e)
		case slices.Index(d.Events, e) < i:
			add(field, "event type %s is listed twice", e)
		}
	}
	return ps
}

// InFlightProblem is why n cannot be a destination's in_flight, "" when it can: 1 (one
// write at a time, everything in arrival order) to MaxInFlight. The config file and the
// API both say it, in these words.
func InFlightProblem(n int) string {
	if n >= 1 && n <= MaxInFlight {
		return ""
	}
	return fmt.Sprintf("in_flight %d is out of range: it is how many writes may be in flight at once, a whole number from 1 (one at a time, in arrival order) to %d; leave it out for the relay's default", n, MaxInFlight)
}

// MaxRateProblem is why r cannot be a destination's max_rate, "" when it can: more than 0
// and at most MaxRateLimit writes per second (NaN and the infinities are refused).
func MaxRateProblem(r float64) string {
	if r > 0 && r <= MaxRateLimit {
		return ""
	}
	return fmt.Sprintf("max_rate %s is out of range: it caps the writes per second, more than 0 and at most %d; leave it out for no cap", strconv.FormatFloat(r, 'g', -1, 64), MaxRateLimit)
}

// checkProjectID applies Google Cloud's project id rules: 6 to 30 characters, lowercase
// letters, digits and hyphens, starting with a letter and not ending with a hyphen.
func checkProjectID(p string) string {
	switch {
	case strings.HasPrefix(p, "projects/"):
		return "project_id is the project's id alone (like acme-prod), not a resource name starting with projects/"
	case len(p) < 6 || len(p) > 30:
		return fmt.Sprintf("project id %q has %d characters: a Google Cloud project id has 6 to 30", p, len(p))
	case p[0] < 'a' || p[0] > 'z':
		return fmt.Sprintf("project id %q must start with a lowercase letter", p)
	case !projectChars.MatchString(p):
		return fmt.Sprintf("project id %q may only hold lowercase letters, digits and hyphens", p)
	case strings.HasSuffix(p, "-"):
		return fmt.Sprintf("project id %q must not end with a hyphen", p)
	}
	return ""
}

// checkTopicID applies Pub/Sub's topic id rules: 3 to 255 characters from
// [A-Za-z0-9-_.~+%], starting with a letter, not starting with "goog".
func checkTopicID(t string) string {
	switch {
	case strings.HasPrefix(t, "projects/"):
		return "topic_id is the topic's id alone (like relay-events), not its full name projects/…/topics/…: put the project in project_id"
	case len(t) < 3 || len(t) > 255:
		return fmt.Sprintf("topic id has %d characters: a Pub/Sub topic id has 3 to 255", len(t))
	case !('a' <= t[0] && t[0] <= 'z' || 'A' <= t[0] && t[0] <= 'Z'):
		return fmt.Sprintf("topic id %q must start with a letter", t)
	case !topicChars.MatchString(t):
		return fmt.Sprintf("topic id %q may only hold letters, digits and - _ . ~ + %%", t)
	case strings.HasPrefix(strings.ToLower(t), "goog"):
		return fmt.Sprintf("topic id %q must not start with \"goog\": Google reserves those names", t)
	}
	return ""
}

// CheckPrincipalARN returns why s cannot be our own AWS principal (the identity customers
// trust), or "" when it is an aws-partition IAM role or user ARN.
func CheckPrincipalARN(s string) string {
	a, err := ParseARN(s)
	switch {
	case err != nil:
		return fmt.Sprintf("%v: it must be the ARN of the relay's own IAM role, like arn:aws:iam::999999999999:role/relay-delivery", err)
	case a.Partition != Partition:
		return fmt.Sprintf("partition %s is not supported: %s", a.Partition, partitionRefused)
	case a.Service != "iam":
		return fmt.Sprintf("this is an ARN of the %s service: customers trust an IAM role or user (arn:aws:iam::ACCOUNT:role/NAME)", a.Service)
	case a.Region != "":
		return "an IAM ARN has no region (arn:aws:iam::ACCOUNT:role/NAME)"
	case !IsAccountID(a.AccountID):
		return "the account in the ARN is not a 12-digit AWS account id"
	case !roleKind.resource.MatchString(a.Resource) && !userResource.MatchString(a.Resource):
		return fmt.Sprintf("resource %q is not an IAM role or user: expected role/NAME or user/NAME", a.Resource)
	}
	return ""
}
