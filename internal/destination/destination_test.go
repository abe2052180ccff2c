package destination

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

const (
	role   = "arn:aws:iam::111122223333:role/mercamap-delivery"
	bus    = "arn:aws:events:us-east-1:111122223333:event-bus/orders"
	stream = "arn:aws:kinesis:eu-west-1:111122223333:stream/orders"
	kmsKey = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
)

func busDest() Destination {
	return Destination{ID: "orders-bus", Account: "acct_123", Connector: EventBridge, BusARN: bus, RoleARN: role, Events: []string{"job.completed"}}
}

func streamDest() Destination {
	return Destination{ID: "orders-stream", Account: "acct_123", Connector: Kinesis, StreamARN: stream, RoleARN: role, KMSKeyARN: kmsKey}
}

func topicDest() Destination {
	return Destination{ID: "orders-topic", Account: "acct_123", Connector: PubSub, ProjectID: "acme-prod", TopicID: "relay-events"}
}

func TestParseARN(t *testing.T) {
	tests := []struct {
		in      string
		want    ARN
		wantErr bool
	}{
		{in: bus, want: ARN{"aws", "events", "us-east-1", "111122223333", "event-bus/orders"}},
		{in: role, want: ARN{"aws", "iam", "", "111122223333", "role/mercamap-delivery"}},
		{in: "arn:aws-us-gov:events:us-gov-west-1:111122223333:event-bus/orders", want: ARN{"aws-us-gov", "events", "us-gov-west-1", "111122223333", "event-bus/orders"}},
		{in: "arn:aws-cn:kinesis:cn-north-1:111122223333:stream/orders", want: ARN{"aws-cn", "kinesis", "cn-north-1", "111122223333", "stream/orders"}},
		{in: "arn:aws:sns:us-east-1:111122223333:topic:with:colons", want: ARN{"aws", "sns", "us-east-1", "111122223333", "topic:with:colons"}},
		{in: "", wantErr: true},
		{in: "orders", wantErr: true},
		{in: "arn:aws:events:us-east-1:111122223333", wantErr: true},
		{in: "arn::events:us-east-1:111122223333:event-bus/x", wantErr: true},
		{in: "arn:aws::us-east-1:111122223333:event-bus/x", wantErr: true},
		{in: "arn:aws:events:us-east-1:111122223333:", wantErr: true},
		{in: "ARN:aws:events:us-east-1:111122223333:event-bus/x", wantErr: true},
		{in: "arn:aws:events:us-east-1:111122223333:event-bus/x ", wantErr: true},
		{in: "https://events.us-east-1.amazonaws.com/", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseARN(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseARN(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil {
			if tt.in != "" && strings.Contains(err.Error(), tt.in) {
				t.Errorf("ParseARN(%q) error repeats the input: %v", tt.in, err)
			}
			continue
		}
		if got != tt.want {
			t.Errorf("ParseARN(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
		if got.String() != tt.in {
			t.Errorf("ARN.String() = %q, want %q", got.String(), tt.in)
		}
	}
}

func TestValidateAcceptsGoodTargets(t *testing.T) {
	good := []Destination{
		busDest(), streamDest(), topicDest(),
		{Connector: Kinesis, StreamARN: stream, RoleARN: role}, // no KMS key
		{Connector: EventBridge, BusARN: "arn:aws:events:ap-southeast-2:111122223333:event-bus/default", RoleARN: "arn:aws:iam::111122223333:role/service-role/team/delivery"},
		{Connector: EventBridge, BusARN: "arn:aws:events:il-central-1:111122223333:event-bus/aws.partner/saas.com/x", RoleARN: role},
		{Connector: Kinesis, StreamARN: "arn:aws:kinesis:mx-central-1:111122223333:stream/s", RoleARN: role,
			KMSKeyARN: "arn:aws:kms:mx-central-1:111122223333:key/mrk-1234abcd12ab34cd56ef1234567890ab"},
		{Connector: PubSub, ProjectID: "abcdef", TopicID: "Top"},
		{Connector: PubSub, ProjectID: "a23456789012345678901234567890", TopicID: "t-_.~+%9"},
	}
	for _, region := range []string{"us-east-1", "us-west-2", "eu-west-1", "eu-central-2", "ap-southeast-2", "ap-northeast-3", "ca-central-1", "ca-west-1", "sa-east-1", "me-south-1", "me-central-1", "af-south-1", "il-central-1", "mx-central-1", "ap-southeast-7", "eu-north-1"} {
		good = append(good, Destination{Connector: EventBridge, BusARN: "arn:aws:events:" + region + ":111122223333:event-bus/b", RoleARN: role})
	}
	for _, d := range good {
		if ps := d.Validate(); len(ps) != 0 {
			t.Errorf("Validate(%+v) = %v, want no problems", d, ps)
		}
	}
}

func TestValidateReportsEachProblem(t *testing.T) {
	tests := []struct {
		name  string
		d     Destination
		field string
		says  string
	}{
		{"unknown connector", Destination{Connector: "sqs"}, "connector", `unknown connector "sqs": use eventbridge, kinesis or pubsub`},
		{"no connector", Destination{}, "connector", "connector is required"},
		{"bus missing", Destination{Connector: EventBridge, RoleARN: role}, "bus_arn", "bus_arn is required"},
		{"role missing", Destination{Connector: EventBridge, BusARN: bus}, "role_arn", "role_arn is required"},
		{"stream missing", Destination{Connector: Kinesis, RoleARN: role}, "stream_arn", "stream_arn is required"},
		{"project missing", Destination{Connector: PubSub, TopicID: "relay-events"}, "project_id", "project_id is required"},
		{"topic missing", Destination{Connector: PubSub, ProjectID: "acme-prod"}, "topic_id", "topic_id is required"},
		{"garbage bus", Destination{Connector: EventBridge, BusARN: "orders", RoleARN: role}, "bus_arn", "bus_arn is not an ARN"},
		{"govcloud bus", Destination{Connector: EventBridge, BusARN: "arn:aws-us-gov:events:us-gov-west-1:111122223333:event-bus/orders", RoleARN: role},
			"bus_arn", "partition aws-us-gov is not supported: only the aws partition (GovCloud and China regions are refused)"},
		{"china stream", Destination{Connector: Kinesis, StreamARN: "arn:aws-cn:kinesis:cn-north-1:111122223333:stream/orders", RoleARN: role},
			"stream_arn", "partition aws-cn is not supported"},
		{"china role", Destination{Connector: Kinesis, StreamARN: stream, RoleARN: "arn:aws-cn:iam::111122223333:role/r"},
			"role_arn", "partition aws-cn is not supported"},
		{"govcloud region in aws partition", Destination{Connector: EventBridge, BusARN: "arn:aws:events:us-gov-east-1:111122223333:event-bus/orders", RoleARN: role},
			"bus_arn", "region us-gov-east-1 is a GovCloud region"},
		{"china region in aws partition", Destination{Connector: EventBridge, BusARN: "arn:aws:events:cn-northwest-1:111122223333:event-bus/orders", RoleARN: role},
			"bus_arn", "region cn-northwest-1 is a China region"},
		{"iso region", Destination{Connector: EventBridge, BusARN: "arn:aws:events:us-iso-east-1:111122223333:event-bus/orders", RoleARN: role},
			"bus_arn", "region us-iso-east-1 is an isolated (ISO) region"},
		{"isob region", Destination{Connector: Kinesis, StreamARN: "arn:aws:kinesis:us-isob-east-1:111122223333:stream/s", RoleARN: role},
			"stream_arn", "isolated (ISO) region"},
		{"made-up region", Destination{Connector: EventBridge, BusARN: "arn:aws:events:moon-base-1:111122223333:event-bus/orders", RoleARN: role},
			"bus_arn", "region moon-base-1 is not a commercial AWS region"},
		{"no region", Destination{Connector: EventBridge, BusARN: "arn:aws:events::111122223333:event-bus/orders", RoleARN: role},
			"bus_arn", "the region is missing"},
		{"bus in another account", Destination{Connector: EventBridge, BusARN: "arn:aws:events:us-east-1:444455556666:event-bus/orders", RoleARN: role},
			"bus_arn", "an EventBridge event bus is in AWS account 444455556666 but the role is in account 111122223333: it must be in the role's account"},
		{"stream in another account", Destination{Connector: Kinesis, StreamARN: "arn:aws:kinesis:eu-west-1:444455556666:stream/orders", RoleARN: role},
			"stream_arn", "a Kinesis stream is in AWS account 444455556666 but the role is in account 111122223333"},
		{"short account", Destination{Connector: EventBridge, BusARN: "arn:aws:events:us-east-1:1234:event-bus/orders", RoleARN: role},
			"bus_arn", "account 1234 is not a 12-digit AWS account id"},
		{"wrong service for bus", Destination{Connector: EventBridge, BusARN: "arn:aws:sqs:us-east-1:111122223333:orders", RoleARN: role},
			"bus_arn", "this is an ARN of the sqs service, not of an EventBridge event bus"},
		{"bus resource shape", Destination{Connector: EventBridge, BusARN: "arn:aws:events:us-east-1:111122223333:rule/orders", RoleARN: role},
			"bus_arn", `resource "rule/orders" is not an EventBridge event bus: expected event-bus/NAME`},
		{"stream resource shape", Destination{Connector: Kinesis, StreamARN: "arn:aws:kinesis:eu-west-1:111122223333:orders", RoleARN: role},
			"stream_arn", "expected stream/NAME"},
		{"role is a user", Destination{Connector: EventBridge, BusARN: bus, RoleARN: "arn:aws:iam::111122223333:user/bob"},
			"role_arn", "is not an IAM role: expected role/NAME"},
		{"role with region", Destination{Connector: EventBridge, BusARN: bus, RoleARN: "arn:aws:iam:us-east-1:111122223333:role/r"},
			"role_arn", "an IAM role ARN has no region"},
		{"role of wrong service", Destination{Connector: EventBridge, BusARN: bus, RoleARN: "arn:aws:sts::111122223333:assumed-role/r/s"},
			"role_arn", "this is an ARN of the sts service, not of an IAM role"},
		{"kms alias", Destination{Connector: Kinesis, StreamARN: stream, RoleARN: role, KMSKeyARN: "arn:aws:kms:eu-west-1:111122223333:alias/orders"},
			"kms_key_arn", "names a KMS alias"},
		{"kms in another region", Destination{Connector: Kinesis, StreamARN: stream, RoleARN: role, KMSKeyARN: "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"},
			"kms_key_arn", "the KMS key is in region us-east-1 but the stream is in eu-west-1"},
		{"kms in another account", Destination{Connector: Kinesis, StreamARN: stream, RoleARN: role, KMSKeyARN: "arn:aws:kms:eu-west-1:444455556666:key/1234abcd-12ab-34cd-56ef-1234567890ab"},
			"kms_key_arn", "the KMS key is in AWS account 444455556666 but the role is in account 111122223333"},
		{"kms of wrong service", Destination{Connector: Kinesis, StreamARN: stream, RoleARN: role, KMSKeyARN: "arn:aws:iam::111122223333:role/r"},
			"kms_key_arn", "not of a KMS key"},
		{"kms on eventbridge", Destination{Connector: EventBridge, BusARN: bus, RoleARN: role, KMSKeyARN: kmsKey},
			"kms_key_arn", "kms_key_arn is not used by the eventbridge connector"},
		{"role on pubsub", Destination{Connector: PubSub, ProjectID: "acme-prod", TopicID: "relay-events", RoleARN: role},
			"role_arn", "role_arn is not used by the pubsub connector"},
		{"project too short", Destination{Connector: PubSub, ProjectID: "acme", TopicID: "relay-events"}, "project_id", "has 4 characters: a Google Cloud project id has 6 to 30"},
		{"project too long", Destination{Connector: PubSub, ProjectID: strings.Repeat("a", 31), TopicID: "relay-events"}, "project_id", "has 31 characters"},
		{"project starts with digit", Destination{Connector: PubSub, ProjectID: "1acme-prod", TopicID: "relay-events"}, "project_id", "must start with a lowercase letter"},
		{"project uppercase", Destination{Connector: PubSub, ProjectID: "acmeProd", TopicID: "relay-events"}, "project_id", "may only hold lowercase letters"},
		{"project bad char", Destination{Connector: PubSub, ProjectID: "acme_prod", TopicID: "relay-events"}, "project_id", "may only hold lowercase letters, digits and hyphens"},
		{"project trailing hyphen", Destination{Connector: PubSub, ProjectID: "acme-prod-", TopicID: "relay-events"}, "project_id", "must not end with a hyphen"},
		{"topic too short", Destination{Connector: PubSub, ProjectID: "acme-prod", TopicID: "ab"}, "topic_id", "has 2 characters: a Pub/Sub topic id has 3 to 255"},
		{"topic too long", Destination{Connector: PubSub, ProjectID: "acme-prod", TopicID: "t" + strings.Repeat("a", 255)}, "topic_id", "has 256 characters"},
		{"topic starts with digit", Destination{Connector: PubSub, ProjectID: "acme-prod", TopicID: "9events"}, "topic_id", "must start with a letter"},
		{"topic bad char", Destination{Connector: PubSub, ProjectID: "acme-prod", TopicID: "relay events"}, "topic_id", "may only hold letters, digits and - _ . ~ + %"},
		{"topic goog", Destination{Connector: PubSub, ProjectID: "acme-prod", TopicID: "google-events"}, "topic_id", `must not start with "goog"`},
		{"topic full name", Destination{Connector: PubSub, ProjectID: "acme-prod", TopicID: "projects/acme-prod/topics/relay-events"}, "topic_id", "not its full name"},
		{"empty event", Destination{Connector: PubSub, ProjectID: "acme-prod", TopicID: "relay-events", Events: []string{"job.completed", ""}}, "events[1]", "an event type is empty"},
		{"event twice", Destination{Connector: PubSub, ProjectID: "acme-prod", TopicID: "relay-events", Events: []string{"job.failed", "job.failed"}}, "events[1]", "listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := tt.d.Validate()
			for _, p := range ps {
				if p.Field == tt.field && strings.Contains(p.Message, tt.says) {
					return
				}
			}
			t.Errorf("Validate() = %q, want a problem at %s saying %q", ps, tt.field, tt.says)
		})
	}
}

func TestValidateGovCloudSaysPartitionOnce(t *testing.T) {
	d := Destination{Connector: EventBridge, BusARN: "arn:aws-us-gov:events:us-gov-west-1:111122223333:event-bus/orders", RoleARN: "arn:aws-us-gov:iam::111122223333:role/r"}
	want := []Problem{
		{"bus_arn", "partition aws-us-gov is not supported: only the aws partition (GovCloud and China regions are refused)"},
		{"role_arn", "partition aws-us-gov is not supported: only the aws partition (GovCloud and China regions are refused)"},
	}
	if got := d.Validate(); !reflect.DeepEqual(got, want) {
		t.Errorf("Validate() = %q, want %q", got, want)
	}
}

func TestWants(t *testing.T) {
	d := busDest()
	if !d.Wants("job.completed") || d.Wants("job.failed") {
		t.Errorf("a destination filtering on job.completed: Wants(completed)=%v Wants(failed)=%v", d.Wants("job.completed"), d.Wants("job.failed"))
	}
	d.Events = nil
	if !d.Wants("job.failed") || !d.Wants("anything") {
		t.Error("a destination without a filter must want every type")
	}
}

func TestFingerprintChangesOnlyWhenTheDestinationIsRedefined(t *testing.T) {
	base := busDest()
	fp := base.Fingerprint()
	if len(fp) != 64 || fp != busDest().Fingerprint() {
		t.Fatalf("Fingerprint() = %q, not a stable sha256 hex", fp)
	}

	same := busDest()
	same.ID = "renamed" // the id is the key, not part of the definition
	if same.Fingerprint() != fp {
		t.Error("Fingerprint changed with the id alone")
	}
	reordered := busDest()
	reordered.Events = []string{"job.failed", "job.completed"}
	reordered2 := busDest()
	reordered2.Events = []string{"job.completed", "job.failed"}
	if reordered.Fingerprint() != reordered2.Fingerprint() {
		t.Error("Fingerprint depends on the order of the event filter")
	}

	changes := map[string]func(*Destination){
		"bus_arn":   func(d *Destination) { d.BusARN = "arn:aws:events:us-east-1:111122223333:event-bus/other" },
		"role_arn":  func(d *Destination) { d.RoleARN = "arn:aws:iam::111122223333:role/other" },
		"account":   func(d *Destination) { d.Account = "acct_999" },
		"connector": func(d *Destination) { d.Connector = Kinesis },
		"events":    func(d *Destination) { d.Events = nil },
	}
	for name, change := range changes {
		d := busDest()
		change(&d)
		if d.Fingerprint() == fp {
			t.Errorf("Fingerprint did not change when %s changed", name)
		}
	}
	// The same value moved to another field is another definition.
	a := Destination{Connector: PubSub, ProjectID: "acme-prod", TopicID: "relay-events"}
	b := Destination{Connector: PubSub, ProjectID: "relay-events", TopicID: "acme-prod"}
	if a.Fingerprint() == b.Fingerprint() {
		t.Error("Fingerprint does not tell fields apart")
	}
}

func TestCloudScopeTargetTopicName(t *testing.T) {
	if got := busDest().CloudScope(); got != "aws:111122223333" {
		t.Errorf("bus CloudScope() = %q", got)
	}
	if got := streamDest().CloudScope(); got != "aws:111122223333" {
		t.Errorf("stream CloudScope() = %q", got)
	}
	if got := topicDest().CloudScope(); got != "gcp:acme-prod" {
		t.Errorf("topic CloudScope() = %q", got)
	}
	if got := (Destination{Connector: EventBridge, RoleARN: "garbage"}).CloudScope(); got != "" {
		t.Errorf("CloudScope() of an unreadable role = %q, want empty", got)
	}

	tests := []struct {
		d    Destination
		want map[string]string
	}{
		{busDest(), map[string]string{"bus_arn": bus, "role_arn": role}},
		{streamDest(), map[string]string{"stream_arn": stream, "role_arn": role, "kms_key_arn": kmsKey}},
		{Destination{Connector: Kinesis, StreamARN: stream, RoleARN: role}, map[string]string{"stream_arn": stream, "role_arn": role}},
		{topicDest(), map[string]string{"project_id": "acme-prod", "topic_id": "relay-events"}},
	}
	for _, tt := range tests {
		if got := tt.d.Target(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Target() = %v, want %v", got, tt.want)
		}
	}
	if got := topicDest().TopicName(); got != "projects/acme-prod/topics/relay-events" {
		t.Errorf("TopicName() = %q", got)
	}
}

func TestCheckPrincipalARN(t *testing.T) {
	for _, ok := range []string{"arn:aws:iam::999999999999:role/relay-delivery", "arn:aws:iam::999999999999:role/path/relay", "arn:aws:iam::999999999999:user/relay"} {
		if msg := CheckPrincipalARN(ok); msg != "" {
			t.Errorf("CheckPrincipalARN(%q) = %q", ok, msg)
		}
	}
	for in, says := range map[string]string{
		"relay": "not an ARN",
		"arn:aws-us-gov:iam::999999999999:role/r":    "partition aws-us-gov is not supported",
		"arn:aws:sts::999999999999:assumed-role/r/s": "sts service",
		"arn:aws:iam::9999:role/r":                   "12-digit",
		"arn:aws:iam::999999999999:group/g":          "not an IAM role or user",
	} {
		if msg := CheckPrincipalARN(in); !strings.Contains(msg, says) {
			t.Errorf("CheckPrincipalARN(%q) = %q, want it to say %q", in, msg, says)
		}
	}
}

// decode turns JSON into plain values so policies compare by structure.
func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return v
}

func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, string(b))
}

var ours = Identity{Name: "mercamap", AWSPrincipalARN: "arn:aws:iam::999999999999:role/relay-delivery", GCPServiceAccount: "relay@relay-prod.iam.gserviceaccount.com"}

// withoutForms is a card's setup as JSON less the role's forms (forms_test.go checks
// them against the policies), each of which it must have.
func withoutForms(t *testing.T, setup any, forms ...string) any {
	t.Helper()
	m := setup.(map[string]any)
	for _, f := range forms {
		if v, ok := m[f]; !ok || v == nil || v == "" {
			t.Errorf("setup.%s = %#v", f, v)
		}
		delete(m, f)
	}
	return m
}

var awsForms = []string{"cloudformation", "terraform", "aws_cli"}

func TestSetupEventBridge(t *testing.T) {
	got := withoutForms(t, asJSON(t, Setup(busDest(), ours, "ext-123")), awsForms...)
	want := decode(t, `{
		"principal_arn": "arn:aws:iam::999999999999:role/relay-delivery",
		"trust_policy": {"Version": "2012-10-17", "Statement": [{
			"Effect": "Allow",
			"Principal": {"AWS": "arn:aws:iam::999999999999:role/relay-delivery"},
			"Action": "sts:AssumeRole",
			"Condition": {"StringEquals": {"sts:ExternalId": "ext-123"}}}]},
		"permissions_policy": {"Version": "2012-10-17", "Statement": [{
			"Effect": "Allow", "Action": "events:PutEvents",
			"Resource": "arn:aws:events:us-east-1:111122223333:event-bus/orders"}]},
		"kms_statement": null, "quick_create_url": null}`)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Setup() =\n%v\nwant\n%v", got, want)
	}
	if m := Setup(busDest(), ours, "x"); m["kms_statement"] != nil {
		t.Errorf("kms_statement = %#v, want an untyped nil", m["kms_statement"])
	}
}

func TestSetupKinesisWithKMSKey(t *testing.T) {
	got := withoutForms(t, asJSON(t, Setup(streamDest(), ours, "ext-456")), awsForms...)
	want := decode(t, `{
		"principal_arn": "arn:aws:iam::999999999999:role/relay-delivery",
		"trust_policy": {"Version": "2012-10-17", "Statement": [{
			"Effect": "Allow",
			"Principal": {"AWS": "arn:aws:iam::999999999999:role/relay-delivery"},
			"Action": "sts:AssumeRole",
			"Condition": {"StringEquals": {"sts:ExternalId": "ext-456"}}}]},
		"permissions_policy": {"Version": "2012-10-17", "Statement": [{
			"Effect": "Allow", "Action": "kinesis:PutRecord",
			"Resource": "arn:aws:kinesis:eu-west-1:111122223333:stream/orders"}]},
		"kms_statement": {
			"Effect": "Allow", "Action": "kms:GenerateDataKey",
			"Resource": "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
			"Condition": {"StringEquals": {"kms:ViaService": "kinesis.eu-west-1.amazonaws.com"}}},
		"quick_create_url": null}`)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Setup() =\n%v\nwant\n%v", got, want)
	}
}

func TestSetupPubSub(t *testing.T) {
	got := withoutForms(t, asJSON(t, Setup(topicDest(), ours, "unused")), "terraform")
	want := decode(t, `{
		"service_account": "relay@relay-prod.iam.gserviceaccount.com",
		"commands": [
			"gcloud pubsub topics add-iam-policy-binding relay-events --project=acme-prod --member=serviceAccount:relay@relay-prod.iam.gserviceaccount.com --role=roles/pubsub.publisher",
			"gcloud pubsub topics add-iam-policy-binding relay-events --project=acme-prod --member=serviceAccount:relay@relay-prod.iam.gserviceaccount.com --role=roles/pubsub.viewer",
			"gcloud pubsub topics update relay-events --project=acme-prod --update-labels=mercamap-account=acct_123"]}`)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Setup() =\n%v\nwant\n%v", got, want)
	}
	other := ours
	other.Name = "acme"
	cmds := PubSubCommands(topicDest(), other)
	if !strings.HasSuffix(cmds[2], "--update-labels=acme-account=acct_123") {
		t.Errorf("label command does not follow identity.name: %q", cmds[2])
	}
	if LabelKey("acme") != "acme-account" {
		t.Errorf("LabelKey(acme) = %q", LabelKey("acme"))
	}
}

func TestSessionPolicies(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"eventbridge", SessionPolicy(busDest()), `{"Version":"2012-10-17","Statement":[
			{"Effect":"Allow","Action":"events:PutEvents","Resource":"arn:aws:events:us-east-1:111122223333:event-bus/orders"}]}`},
		{"kinesis without key", SessionPolicy(Destination{Connector: Kinesis, StreamARN: stream, RoleARN: role}), `{"Version":"2012-10-17","Statement":[
			{"Effect":"Allow","Action":"kinesis:PutRecord","Resource":"arn:aws:kinesis:eu-west-1:111122223333:stream/orders"}]}`},
		{"kinesis with key", SessionPolicy(streamDest()), `{"Version":"2012-10-17","Statement":[
			{"Effect":"Allow","Action":"kinesis:PutRecord","Resource":"arn:aws:kinesis:eu-west-1:111122223333:stream/orders"},
			{"Effect":"Allow","Action":"kms:GenerateDataKey","Resource":"arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab",
			 "Condition":{"StringEquals":{"kms:ViaService":"kinesis.eu-west-1.amazonaws.com"}}}]}`},
		{"deny all", DenyAllPolicy(), `{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"*","Resource":"*"}]}`},
		{"pubsub gets deny all", SessionPolicy(topicDest()), DenyAllPolicy()},
	}
	for _, tt := range tests {
		if got, want := decode(t, tt.got), decode(t, tt.want); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: session policy =\n%s\nwant\n%s", tt.name, tt.got, tt.want)
		}
	}
	if SessionPolicy(streamDest()) != SessionPolicy(streamDest()) {
		t.Error("SessionPolicy is not deterministic")
	}
}

func FuzzParseARN(f *testing.F) {
	for _, s := range []string{bus, role, stream, kmsKey, "arn:aws-us-gov:events:us-gov-west-1:1:event-bus/x", "arn:aws-cn:kinesis:cn-north-1:1:stream/s", "", "arn:", "arn:::::", "garbage"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseARN(s)
		if err != nil {
			return
		}
		if a.String() != s {
			t.Errorf("ParseARN(%q).String() = %q", s, a.String())
		}
		d := Destination{Connector: Kinesis, StreamARN: s, RoleARN: s, KMSKeyARN: s}
		_ = d.Validate()
		_ = SessionPolicy(d)
	})
}
