package destination

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestWindowIsTheDestinationsOwnElseTheDeploymentsDefault: a destination that sets no
// in_flight takes the default it is given; one that sets it keeps its own.
func TestWindowIsTheDestinationsOwnElseTheDeploymentsDefault(t *testing.T) {
	d := busDest()
	if got := d.Window(DefaultInFlight); got != DefaultInFlight {
		t.Errorf("unset: Window(%d) = %d", DefaultInFlight, got)
	}
	if got := d.Window(3); got != 3 {
		t.Errorf("unset: Window(3) = %d", got)
	}
	d.InFlight = 1
	if got := d.Window(DefaultInFlight); got != 1 {
		t.Errorf("in_flight 1: Window(%d) = %d, want 1", DefaultInFlight, got)
	}
}

// fingerprint020 is Fingerprint as release 0.2.0 computed it: the bytes it hashed had no
// settings.
func fingerprint020(d Destination) string {
	events := append([]string{}, d.Events...)
	b, _ := json.Marshal(struct {
		V         int       `json:"v"`
		Connector Connector `json:"connector"`
		Account   string    `json:"account"`
		BusARN    string    `json:"bus_arn"`
		StreamARN string    `json:"stream_arn"`
		RoleARN   string    `json:"role_arn"`
		KMSKeyARN string    `json:"kms_key_arn"`
		ProjectID string    `json:"project_id"`
		TopicID   string    `json:"topic_id"`
		Events    []string  `json:"events"`
	}{1, d.Connector, d.Account, d.BusARN, d.StreamARN, d.RoleARN, d.KMSKeyARN, d.ProjectID, d.TopicID, events})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestTheSettingsChangeTheFingerprintOnlyWhenSet: a destination that sets neither
// in_flight nor max_rate has the fingerprint 0.2.0 gave it (an upgrade redefines
// nothing, and both releases of a roll agree on it); setting or changing either one
// changes it, so the worker restarts with the new setting.
func TestTheSettingsChangeTheFingerprintOnlyWhenSet(t *testing.T) {
	for _, d := range []Destination{busDest(), streamDest(), topicDest()} {
		if got, want := d.Fingerprint(), fingerprint020(d); got != want {
			t.Errorf("%s without settings: fingerprint %s, 0.2.0 gave %s", d.ID, got, want)
		}
	}
	base := busDest().Fingerprint()
	seen := map[string]string{base: "unset"}
	for name, change := range map[string]func(*Destination){
		"in_flight 1":  func(d *Destination) { d.InFlight = 1 },
		"in_flight 4":  func(d *Destination) { d.InFlight = 4 },
		"max_rate 50":  func(d *Destination) { d.MaxRate = 50 },
		"max_rate 0.5": func(d *Destination) { d.MaxRate = 0.5 },
		"both":         func(d *Destination) { d.InFlight, d.MaxRate = 4, 50 },
	} {
		d := busDest()
		change(&d)
		fp := d.Fingerprint()
		if other, dup := seen[fp]; dup {
			t.Errorf("%s has the fingerprint of %s", name, other)
		}
		seen[fp] = name
	}
	nan := busDest()
	nan.MaxRate = math.NaN()
	_ = nan.Fingerprint() // an unchecked NaN does not panic
}

// TestSettingsOutOfRangeAreRefusedNamingTheField: Validate refuses a window outside
// 1–64 and a rate cap that is not more than 0 and at most 10000 writes a second, each
// problem under its field, in a sentence that names it; zero is unset, and so fine.
func TestSettingsOutOfRangeAreRefusedNamingTheField(t *testing.T) {
	for _, tt := range []struct {
		inFlight int
		maxRate  float64
		field    string
	}{
		{inFlight: 65, field: "in_flight"},
		{inFlight: -1, field: "in_flight"},
		{maxRate: -2, field: "max_rate"},
		{maxRate: 10001, field: "max_rate"},
		{maxRate: math.Inf(1), field: "max_rate"},
		{maxRate: math.NaN(), field: "max_rate"},
	} {
		d := topicDest()
		d.InFlight, d.MaxRate = tt.inFlight, tt.maxRate
		ps := d.Validate()
		if len(ps) != 1 || ps[0].Field != tt.field || !strings.HasPrefix(ps[0].Message, tt.field+" ") {
			t.Errorf("in_flight %d, max_rate %v: %v; want one problem of %s naming it", tt.inFlight, tt.maxRate, ps, tt.field)
		}
	}
	for _, ok := range []Destination{{InFlight: 1}, {InFlight: MaxInFlight}, {MaxRate: 0.1}, {MaxRate: MaxRateLimit}, {}} {
		d := topicDest()
		d.InFlight, d.MaxRate = ok.InFlight, ok.MaxRate
		if ps := d.Validate(); len(ps) != 0 {
			t.Errorf("in_flight %d, max_rate %v: %v; want none", ok.InFlight, ok.MaxRate, ps)
		}
	}
	if InFlightProblem(0) == "" {
		t.Error("InFlightProblem(0) is empty: a 0 written in an API body must be refused")
	}
	if MaxRateProblem(0) == "" {
		t.Error("MaxRateProblem(0) is empty: a 0 written in an API body must be refused")
	}
}
