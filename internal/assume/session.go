package assume

import (
	"context"
	"fmt"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

// session assumes d's role with its real ExternalId, capped by a session policy that
// allows only d's one write, for the shortest duration STS allows.
func (a *Assumer) session(ctx context.Context, d destination.Destination) (aws.Credentials, error) {
	if d.ExternalID == "" {
		return aws.Credentials{}, failures.NewNotTaken(
			"did not take the event: the destination has no ExternalId stored yet; retrying with backoff", nil)
	}
	out, err := a.o.STS.AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn: aws.String(d.RoleARN),
		// The customer's CloudTrail shows this name on every write.
		RoleSessionName: aws.String(SessionName(a.o.IdentityName, d.Account)),
		ExternalId:      aws.String(d.ExternalID),
		Policy:          aws.String(destination.SessionPolicy(d)),
		DurationSeconds: aws.Int32(int32(SessionDuration.Seconds())),
	}, oneAttempt)
	switch {
	case isAccessDenied(err):
		principal := a.o.PrincipalARN
		if principal == "" {
			principal = "the relay's principal"
		}
		return aws.Credentials{}, failures.NewRejected(fmt.Sprintf(
			"AWS refused to let the relay assume role %s (AccessDenied) — check that the role exists and that its trust policy "+
				"lets %s assume it with Condition StringEquals sts:ExternalId = %q", d.RoleARN, principal, d.ExternalID), err)
	case err != nil:
		// Throttling, timeouts and refusals of our own credentials: failures' table says not taken.
		return aws.Credentials{}, fmt.Errorf("assume role %s: %w", d.RoleARN, err)
	case out.Credentials == nil || out.Credentials.Expiration == nil:
		return aws.Credentials{}, failures.NewNotTaken(
			"did not take the event: STS answered AssumeRole without credentials; retrying with backoff", nil)
	}
	c := out.Credentials
	return aws.Credentials{
		AccessKeyID:     aws.ToString(c.AccessKeyId),
		SecretAccessKey: aws.ToString(c.SecretAccessKey),
		SessionToken:    aws.ToString(c.SessionToken),
		Source:          "assume:" + d.ID,
		CanExpire:       true,
		Expires:         *c.Expiration,
	}, nil
}

// notInSessionName is everything STS refuses in a RoleSessionName ([\w+=,.@-]).
var notInSessionName = regexp.MustCompile(`[^\w+=,.@-]`)

// SessionName is <name>-<account> made acceptable to STS: refused characters become
// '-', and the result is cut to 64 characters (and padded to the minimum of 2).
func SessionName(name, account string) string {
	s := notInSessionName.ReplaceAllString(name+"-"+account, "-")
	if len(s) > 64 {
		s = s[:64]
	}
	for len(s) < 2 {
		s += "-"
	}
	return s
}
