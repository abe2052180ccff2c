package config

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/destination"
)

const (
	extSecret = "external-id-s3cret-0123456789abcdef"
	pinA      = "relay-0123456789abcdef0123456789abcdef"
	pinB      = "relay-fedcba9876543210fedcba9876543210"
)

var issuedForm = regexp.MustCompile(`^relay-[0-9a-f]{32}$`)

// extDoc is the base file with identity.external_id_secret (when secret is not "") and
// the given destinations.
func extDoc(secret, dests string) string {
	identity := `identity: {aws_principal_arn: "arn:aws:iam::999999999999:role/relay-delivery", gcp_service_account: relay@relay-prod.iam.gserviceaccount.com`
	if secret != "" {
		identity += ", external_id_secret: " + secret
	}
	return doc(map[string]string{"identity": identity + "}", "destinations": "destinations:\n" + dests})
}

func bus(id, acct, extra string) string {
	return fmt.Sprintf("  - {id: %s, account: %s, connector: eventbridge, bus_arn: \"arn:aws:events:us-east-1:111122223333:event-bus/%s\", role_arn: \"arn:aws:iam::111122223333:role/r\"%s}\n", id, acct, id, extra)
}

const topic = "  - {id: orders-topic, account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-events}\n"

func TestPinnedAndDerivedExternalIDs(t *testing.T) {
	file := extDoc("env:EXT", bus("pinned", "acct_123", ", external_id: "+pinA)+bus("derived", "acct_123", "")+
		bus("other", "acct_456", "")+topic)
	c, err := Parse([]byte(file), env(map[string]string{"EXT": extSecret}), nil)
	if err != nil {
		t.Fatal(err)
	}
	pinned, derived, other, pubsub := c.Destinations[0], c.Destinations[1], c.Destinations[2], c.Destinations[3]
	if pinned.ConfiguredExternalID() != pinA || pinned.DerivedExternalID != "" {
		t.Errorf("a pin must win over the secret: %+v", pinned)
	}
	if got := derived.ConfiguredExternalID(); !issuedForm.MatchString(got) {
		t.Errorf("derived id %q is not in the issued form", got)
	}
	if derived.ConfiguredExternalID() == other.ConfiguredExternalID() {
		t.Error("two destinations derived the same ExternalId")
	}
	if pubsub.ConfiguredExternalID() != "" {
		t.Errorf("a pubsub destination got an ExternalId %q", pubsub.ConfiguredExternalID())
	}
	// The same secret derives the same id on every parse (that is what survives Redis).
	again, err := Parse([]byte(file), env(map[string]string{"EXT": extSecret}), nil)
	if err != nil || again.Destinations[1].ConfiguredExternalID() != derived.ConfiguredExternalID() {
		t.Fatalf("a second parse derived %q, want %q (%v)", again.Destinations[1].ConfiguredExternalID(), derived.ConfiguredExternalID(), err)
	}
	// The derivation is fixed: a change to it would change every derived id in the field.
	if got, want := destination.DeriveExternalID([]byte(extSecret), "acct_123", "derived"), derived.ConfiguredExternalID(); got != want {
		t.Errorf("DeriveExternalID = %q, config derived %q", got, want)
	}
	// A known answer, computed apart (Python's hmac): HMAC-SHA256(secret, label NUL account NUL id).
	if got := destination.DeriveExternalID([]byte(extSecret), "acct_123", "orders-bus"); got != "relay-06ff010f642bc0b3df037554fb356b98" {
		t.Errorf("the derivation changed: %s", got)
	}
	if strings.Contains(fmt.Sprintf("%+v %#v", *c, *c), extSecret) {
		t.Error("the Config holds the secret")
	}
}

func TestExternalIDProblemsAtTheirPaths(t *testing.T) {
	tests := []struct {
		name, file string
		env        map[string]string
		path, says string
	}{
		{"uppercase hex", extDoc("", bus("d", "acct_123", ", external_id: "+strings.ToUpper(pinA[6:]))), nil,
			"destinations[0].external_id", `an ExternalId is "relay-" and 32 lowercase hexadecimal characters`},
		{"too short", extDoc("", bus("d", "acct_123", ", external_id: "+pinA[:20])), nil,
			"destinations[0].external_id", "exactly as the relay issues it"},
		{"another prefix", extDoc("", bus("d", "acct_123", ", external_id: ext-0123456789abcdef0123456789abcdef")), nil,
			"destinations[0].external_id", "lowercase hexadecimal"},
		{"pin on pubsub", extDoc("", "  - {id: t, account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-events, external_id: "+pinA+"}\n"), nil,
			"destinations[0].external_id", "a pubsub destination has no ExternalId"},
		{"two destinations pin one id", extDoc("", bus("a", "acct_123", ", external_id: "+pinA)+bus("b", "acct_456", ", external_id: "+pinA)), nil,
			"destinations[1].external_id", "is the ExternalId of destinations[0] too"},
		{"short secret", extDoc("env:EXT", bus("d", "acct_123", "")), map[string]string{"EXT": "short-s3cret"},
			"identity.external_id_secret", "is 12 bytes: use at least 32 random characters"},
		{"secret not set", extDoc("env:EXT", bus("d", "acct_123", "")), nil,
			"identity.external_id_secret", "environment variable EXT is not set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.file), env(tt.env), nil)
			if err == nil {
				t.Fatalf("no problem for:\n%s", tt.file)
			}
			found := false
			for _, p := range problemsOf(t, err) {
				found = found || (p.Path == tt.path && strings.Contains(p.Message, tt.says))
			}
			if !found {
				t.Errorf("want %s: …%s…, got:\n%v", tt.path, tt.says, err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("a problem repeats the secret:\n%v", err)
			}
		})
	}
}

func TestAConfigThatWouldChangeAnIssuedExternalIDIsAProblem(t *testing.T) {
	parse := func(file string) *Config {
		t.Helper()
		c, err := Parse([]byte(file), env(map[string]string{"EXT": extSecret}), nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	derived := destination.DeriveExternalID([]byte(extSecret), "acct_123", "d")

	// A pin other than the issued id.
	ps := parse(extDoc("", topic+bus("d", "acct_123", ", external_id: "+pinB))).ExternalIDProblems(map[string]string{"d": pinA})
	if len(ps) != 1 || ps[0].Path != "destinations[1].external_id" ||
		!strings.Contains(ps[0].Message, "pins "+pinB+" but the relay issued "+pinA) || !strings.HasSuffix(ps[0].Message, "pin external_id: "+pinA) {
		t.Errorf("changed pin: %v", ps)
	}
	// A secret added after the id was issued at random.
	ps = parse(extDoc("env:EXT", bus("d", "acct_123", ""))).ExternalIDProblems(map[string]string{"d": pinA})
	if len(ps) != 1 || ps[0].Path != "destinations[0].external_id" ||
		!strings.Contains(ps[0].Message, "identity.external_id_secret derives "+derived+" but the relay issued "+pinA) ||
		!strings.HasSuffix(ps[0].Message, "pin external_id: "+pinA) || strings.Contains(ps[0].Message, extSecret) {
		t.Errorf("secret added later: %v", ps)
	}
	// What the operator does then: pin the issued one (the secret still derives new ones).
	c := parse(extDoc("env:EXT", bus("d", "acct_123", ", external_id: "+pinA)+bus("e", "acct_123", "")))
	if ps := c.ExternalIDProblems(map[string]string{"d": pinA}); len(ps) != 0 {
		t.Errorf("pinning the issued id: %v", ps)
	}
	// Same id, nothing issued yet, or nothing configured: no problem.
	for _, issued := range []map[string]string{{"d": derived}, {}, {"d": ""}} {
		if ps := parse(extDoc("env:EXT", bus("d", "acct_123", ""))).ExternalIDProblems(issued); len(ps) != 0 {
			t.Errorf("issued %v: %v", issued, ps)
		}
	}
	if ps := parse(extDoc("", bus("d", "acct_123", ""))).ExternalIDProblems(map[string]string{"d": pinA}); len(ps) != 0 {
		t.Errorf("unpinned, issued at random: %v", ps)
	}
	// A pin equal to the id Redis holds for another destination.
	ps = parse(extDoc("", bus("a", "acct_123", "")+bus("b", "acct_123", ", external_id: "+pinA))).ExternalIDProblems(map[string]string{"a": pinA})
	if len(ps) != 1 || ps[0].Path != "destinations[1].external_id" || !strings.Contains(ps[0].Message, "is the ExternalId of destinations[0]") {
		t.Errorf("a pin of another destination's id: %v", ps)
	}
}

// An AWS destination with neither a pin nor the secret breaks the promise that its
// ExternalId never changes: each is named by its path with the fix; past 20, one more
// problem counts the rest. Pins, the secret and Pub/Sub pass.
func TestUnkeptExternalIDsNameEachDestinationAndTheFix(t *testing.T) {
	var dests strings.Builder
	dests.WriteString(bus("kept", "acct_123", ", external_id: "+pinA) + topic)
	for i := range 23 {
		dests.WriteString(bus(fmt.Sprintf("loose-%02d", i), "acct_123", ""))
	}
	c, err := Parse([]byte(extDoc("", dests.String())), env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := c.UnkeptExternalIDs("/etc/relay/relay.yaml")
	if len(ps) != 21 {
		t.Fatalf("%d problems, want 20 named and one counting the rest:\n%v", len(ps), ps)
	}
	if ps[0].Path != "destinations[2].external_id" || !strings.Contains(ps[0].Message, "identity.external_id_secret") ||
		!strings.Contains(ps[0].Message, "relay external-ids --config /etc/relay/relay.yaml") {
		t.Errorf("first problem %v: want destinations[2] with both fixes", ps[0])
	}
	if last := ps[20]; last.Path != "destinations" || !strings.Contains(last.Message, "3 more") {
		t.Errorf("last problem %v: want the 3 not named counted", last)
	}
	withSecret, err := Parse([]byte(extDoc("env:EXT", dests.String())), env(map[string]string{"EXT": extSecret}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ps := withSecret.UnkeptExternalIDs("relay.yaml"); len(ps) != 0 {
		t.Errorf("with identity.external_id_secret: %v", ps)
	}
}
