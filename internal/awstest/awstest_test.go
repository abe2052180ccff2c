package awstest

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
)

const role = "arn:aws:iam::111122223333:role/delivery"

func assumeRole(t *testing.T, s *STS, in sts.AssumeRoleInput) (*sts.AssumeRoleOutput, string) {
	t.Helper()
	c := sts.New(sts.Options{Region: "us-east-1", BaseEndpoint: aws.String(s.URL), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", "")})
	if in.RoleSessionName == nil {
		in.RoleSessionName = aws.String("mercamap-acct_1")
	}
	in.RoleArn = aws.String(role)
	out, err := c.AssumeRole(t.Context(), &in)
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return nil, apiErr.ErrorCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return out, ""
}

// Real STS gives one answer for no trust, a wrong ExternalId and a missing one, so a
// caller cannot tell them apart; the test STS must not let tests tell them apart either.
func TestSTSDeniesAlikeWhateverTheReason(t *testing.T) {
	for _, tt := range []struct {
		name     string
		register func(*STS)
		extID    *string
		want     string // "" when granted
	}{
		{"right ExternalId", func(s *STS) { s.RequireExternalID(role, "ext-1") }, aws.String("ext-1"), ""},
		{"wrong ExternalId", func(s *STS) { s.RequireExternalID(role, "ext-1") }, aws.String("ext-2"), "AccessDenied"},
		{"missing ExternalId", func(s *STS) { s.RequireExternalID(role, "ext-1") }, nil, "AccessDenied"},
		{"trusts nobody", func(s *STS) { s.TrustNobody(role) }, aws.String("ext-1"), "AccessDenied"},
		{"unknown role", func(*STS) {}, aws.String("ext-1"), "AccessDenied"},
		{"any ExternalId", func(s *STS) { s.AllowAny(role) }, aws.String("whatever"), ""},
		{"no ExternalId at all", func(s *STS) { s.AllowAny(role) }, nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSTS(t)
			tt.register(s)
			out, code := assumeRole(t, s, sts.AssumeRoleInput{ExternalId: tt.extID, DurationSeconds: aws.Int32(900)})
			if code != tt.want {
				t.Fatalf("AssumeRole answered %q, want %q", code, tt.want)
			}
			if out != nil {
				r := s.Requests()[0]
				if aws.ToString(out.Credentials.AccessKeyId) != r.AccessKeyID || !out.Credentials.Expiration.Equal(r.Expiration) {
					t.Fatalf("credentials %+v do not match the recorded session %+v", out.Credentials, r)
				}
			}
		})
	}
}

func TestSTSRefusesWhatRealSTSRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   sts.AssumeRoleInput
		want string
	}{
		{"session name with a space", sts.AssumeRoleInput{RoleSessionName: aws.String("mercamap acct")}, "ValidationError"},
		{"session name too long", sts.AssumeRoleInput{RoleSessionName: aws.String(strings.Repeat("a", 65))}, "ValidationError"},
		{"duration under 900 s", sts.AssumeRoleInput{DurationSeconds: aws.Int32(899)}, "ValidationError"},
		{"policy over 2048 characters", sts.AssumeRoleInput{Policy: aws.String(`{"x":"` + strings.Repeat("a", 2048) + `"}`)}, "ValidationError"},
		{"policy not JSON", sts.AssumeRoleInput{Policy: aws.String(`{`)}, "MalformedPolicyDocument"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSTS(t)
			s.AllowAny(role)
			if _, code := assumeRole(t, s, tt.in); code != tt.want {
				t.Fatalf("AssumeRole answered %q, want %q", code, tt.want)
			}
		})
	}
}

func TestPolicyAllows(t *testing.T) {
	const bus = "arn:aws:events:us-east-1:111122223333:event-bus/orders"
	for _, tt := range []struct {
		policy string
		want   bool
	}{
		{`{"Statement":[{"Effect":"Allow","Action":"events:PutEvents","Resource":"` + bus + `"}]}`, true},
		{`{"Statement":[{"Effect":"Allow","Action":["kinesis:PutRecord","events:PutEvents"],"Resource":["` + bus + `"]}]}`, true},
		{`{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}`, true},
		{`{"Statement":[{"Effect":"Allow","Action":"events:PutEvents","Resource":"` + bus + `-other"}]}`, false},
		{`{"Statement":[{"Effect":"Allow","Action":"kinesis:PutRecord","Resource":"` + bus + `"}]}`, false},
		{`{"Statement":[{"Effect":"Allow","Action":"*","Resource":"*"},{"Effect":"Deny","Action":"*","Resource":"*"}]}`, false},
		{`{"Statement":[]}`, false},
		{`not json`, false},
	} {
		if got := policyAllows(tt.policy, "events:PutEvents", bus); got != tt.want {
			t.Errorf("policyAllows(%s) = %v, want %v", tt.policy, got, tt.want)
		}
	}
}

// trusting is a trust policy letting CallerARN in under one condition block.
func trusting(condition string) string {
	return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"` + CallerARN +
		`"},"Action":"sts:AssumeRole","Condition":` + condition + `}]}`
}

// TestSTSEvaluatesTrustConditionsAsAWSDoes: the operators a customer's trust policy may
// use on sts:ExternalId and sts:RoleSessionName, evaluated through the real STS client.
func TestSTSEvaluatesTrustConditionsAsAWSDoes(t *testing.T) {
	const id = "relay-0123456789abcdef0123456789abcdef"
	for _, tt := range []struct {
		name, policy string
		extID        *string
		session      string
		want         string // "" when granted
	}{
		{"StringEquals, exact", trusting(`{"StringEquals":{"sts:ExternalId":"` + id + `"}}`), aws.String(id), "", ""},
		{"StringEquals, other", trusting(`{"StringEquals":{"sts:ExternalId":"` + id + `"}}`), aws.String("relay-0"), "", "AccessDenied"},
		{"StringEquals, case matters", trusting(`{"StringEquals":{"sts:ExternalId":"RELAY-X"}}`), aws.String("relay-x"), "", "AccessDenied"},
		{"StringEquals, missing", trusting(`{"StringEquals":{"sts:ExternalId":"` + id + `"}}`), nil, "", "AccessDenied"},
		{"StringEquals, any of a list", trusting(`{"StringEquals":{"sts:ExternalId":["a1","` + id + `"]}}`), aws.String(id), "", ""},
		{"StringEquals, none of a list", trusting(`{"StringEquals":{"sts:ExternalId":["a1","a2"]}}`), aws.String(id), "", "AccessDenied"},
		{"key name in any case", trusting(`{"StringEquals":{"STS:externalid":"` + id + `"}}`), aws.String(id), "", ""},
		{"StringLike relay-*", trusting(`{"StringLike":{"sts:ExternalId":"relay-*"}}`), aws.String(id), "", ""},
		{"StringLike relay-* against probe-", trusting(`{"StringLike":{"sts:ExternalId":"relay-*"}}`), aws.String("probe-0123"), "", "AccessDenied"},
		{"StringLike is case-sensitive", trusting(`{"StringLike":{"sts:ExternalId":"Relay-*"}}`), aws.String(id), "", "AccessDenied"},
		{"StringLike *", trusting(`{"StringLike":{"sts:ExternalId":"*"}}`), aws.String("anything"), "", ""},
		{"StringLike *, missing", trusting(`{"StringLike":{"sts:ExternalId":"*"}}`), nil, "", "AccessDenied"},
		{"StringLike ? is one character", trusting(`{"StringLike":{"sts:ExternalId":"ab?d"}}`), aws.String("abcd"), "", ""},
		{"StringLike ? is not two", trusting(`{"StringLike":{"sts:ExternalId":"ab?d"}}`), aws.String("abccd"), "", "AccessDenied"},
		{"StringLike ? is not none", trusting(`{"StringLike":{"sts:ExternalId":"ab?d"}}`), aws.String("abd"), "", "AccessDenied"},
		{"StringLike * in the middle", trusting(`{"StringLike":{"sts:ExternalId":"re*-*f"}}`), aws.String(id), "", ""},
		{"StringLike any of a list", trusting(`{"StringLike":{"sts:ExternalId":["x*","relay-0*"]}}`), aws.String(id), "", ""},
		{"StringNotLike holds when missing", trusting(`{"StringNotLike":{"sts:ExternalId":"probe-*"}}`), nil, "", ""},
		{"StringNotLike refuses a match", trusting(`{"StringNotLike":{"sts:ExternalId":"probe-*"}}`), aws.String("probe-1"), "", "AccessDenied"},
		{"StringEqualsIfExists holds when missing", trusting(`{"StringEqualsIfExists":{"sts:ExternalId":"` + id + `"}}`), nil, "", ""},
		{"StringLike on the session name", trusting(`{"StringLike":{"sts:RoleSessionName":"mercamap-acct_*"}}`), nil, "mercamap-acct_9", ""},
		{"StringLike on the session name, other", trusting(`{"StringLike":{"sts:RoleSessionName":"mercamap-acct_*"}}`), nil, "mercamap-probe-acct_9", "AccessDenied"},
		{"every condition must hold", trusting(`{"StringEquals":{"sts:ExternalId":"` + id + `"},"StringLike":{"sts:RoleSessionName":"x*"}}`),
			aws.String(id), "", "AccessDenied"},
		{"an explicit Deny wins", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRole"},
			{"Effect":"Deny","Principal":{"AWS":"*"},"Action":"sts:*","Condition":{"StringLike":{"sts:ExternalId":"relay-*"}}}]}`,
			aws.String(id), "", "AccessDenied"},
		{"our account's root", `{"Statement":{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::999999999999:root"},"Action":"sts:AssumeRole"}}`,
			aws.String(id), "", ""},
		{"another principal", `{"Statement":[{"Effect":"Allow","Principal":{"AWS":["arn:aws:iam::000000000000:root"]},"Action":"sts:AssumeRole"}]}`,
			aws.String(id), "", "AccessDenied"},
		{"another action", `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"sts:AssumeRoleWithWebIdentity"}]}`,
			aws.String(id), "", "AccessDenied"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSTS(t)
			if err := s.SetTrustPolicy(role, tt.policy); err != nil {
				t.Fatal(err)
			}
			in := sts.AssumeRoleInput{ExternalId: tt.extID, DurationSeconds: aws.Int32(900)}
			if tt.session != "" {
				in.RoleSessionName = aws.String(tt.session)
			}
			if _, code := assumeRole(t, s, in); code != tt.want {
				t.Fatalf("AssumeRole answered %q, want %q", code, tt.want)
			}
		})
	}
}

// TestSTSRefusesTrustPoliciesItCannotEvaluate: a test must not pass on a condition the
// test STS silently ignores.
func TestSTSRefusesTrustPoliciesItCannotEvaluate(t *testing.T) {
	for _, policy := range []string{
		`not json`,
		trusting(`{"ArnLike":{"aws:PrincipalArn":"*"}}`),
		trusting(`{"StringEquals":{"aws:SourceAccount":"1"}}`),
		`{"Statement":[{"Effect":"Allow","NotPrincipal":{"AWS":"x"},"Action":"sts:AssumeRole"}]}`,
		`{"Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},"NotAction":"sts:TagSession"}]}`,
		`{"Statement":[{"Effect":"Maybe","Principal":"*","Action":"sts:AssumeRole"}]}`,
	} {
		if err := NewSTSHandler().SetTrustPolicy(role, policy); err == nil {
			t.Errorf("SetTrustPolicy(%s) took it", policy)
		}
	}
}

// An STS that forgets answers as before, right and wrong ExternalIds alike, but keeps
// no call: what the bench's, in the process whose CPU it measures, relies on.
func TestSTSForgettingRequestsAnswersAsBefore(t *testing.T) {
	s := NewSTS(t)
	s.RequireExternalID(role, "ext-1")
	s.ForgetRequests()
	if out, code := assumeRole(t, s, sts.AssumeRoleInput{ExternalId: aws.String("ext-1")}); code != "" || out.Credentials == nil {
		t.Fatalf("the right ExternalId: %q, want a session", code)
	}
	if _, code := assumeRole(t, s, sts.AssumeRoleInput{ExternalId: aws.String("ext-2")}); code != "AccessDenied" {
		t.Fatalf("a wrong ExternalId: %q, want AccessDenied", code)
	}
	if got := s.Requests(); len(got) != 0 {
		t.Errorf("kept %d calls, want none", len(got))
	}
}
