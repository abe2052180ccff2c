package assume

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

// probe asks STS for d's role with a wrong, random ExternalId. AccessDenied is the only
// good answer: a role that lets the probe in would let any AWS customer of ours in by
// naming it, so it is rejected and never used. Any other error means we could not check,
// which is not taken: the probe is never skipped.
//
// The probe looks exactly like another destination's real session: an ExternalId in the
// issued form and the same session name. A trust policy that tells them apart (StringLike
// "relay-*", a pattern on the session name) would deny the probe yet let in every other
// destination that names the role, so nothing but the exact ExternalId may differ.
func (a *Assumer) probe(ctx context.Context, d destination.Destination) error {
	// Fresh each time, from 128 random bits: never the destination's own id (checked),
	// nor, but for a negligible chance, any id issued to anyone else.
	wrong := destination.NewExternalID()
	for wrong == d.ExternalID {
		wrong = destination.NewExternalID()
	}
	_, err := a.o.STS.AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn:         aws.String(d.RoleARN),
		RoleSessionName: aws.String(SessionName(a.o.IdentityName, d.Account)),
		ExternalId:      aws.String(wrong),
		// Allows nothing: even credentials a misconfigured role hands out can do nothing.
		Policy:          aws.String(destination.DenyAllPolicy()),
		DurationSeconds: aws.Int32(int32(SessionDuration.Seconds())),
	}, oneAttempt)
	if err == nil {
		// Credentials handed out for a wrong ExternalId are dropped here, never used.
		return failures.NewRejectedFor(failures.ReasonExternalIDNotEnforced, fmt.Sprintf(
			"role %s let the relay in with a wrong ExternalId: its trust policy does not require this destination's ExternalId, "+
				"so another AWS customer of ours could name the role and write here as us — add Condition StringEquals "+
				"sts:ExternalId = %q to the role's trust policy (exactly this id: not StringLike, not a wildcard); "+
				"the relay will not use the role until then", d.RoleARN, d.ExternalID), nil)
	}
	if isAccessDenied(err) {
		return nil
	}
	code := failures.Code(err)
	if code == "" {
		code = "no answer"
	}
	return failures.NewNotTaken(fmt.Sprintf(
		"did not take the event: STS did not answer the check that role %s requires its ExternalId (%s); retrying with backoff",
		d.RoleARN, code), err)
}

func isAccessDenied(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "AccessDenied"
}
