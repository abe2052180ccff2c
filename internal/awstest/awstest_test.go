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
