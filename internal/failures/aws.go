package failures

import (
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
)

// rule is what one typed code means: its class, the words for the card, and the
// fix (rejected) or what happens next (not taken; "retrying with backoff" when empty).
type rule struct {
	class Class
	words string
	fix   string
}

// onOurSide is the tail for codes that refuse our own session, signature or clock:
// the contract counts these as not taken, since nothing the customer did caused them.
const onOurSide = "the fault is on our side, not the customer's; retrying with backoff"

// awsRules maps AWS error codes (smithy.APIError.ErrorCode) from EventBridge, Kinesis
// and STS to an outcome. Codes not listed fall back to the SDK's throttle codes, then
// to the HTTP status: 4xx rejected, 5xx or unknown not taken.
var awsRules = map[string]rule{
	// Not taken: the bus is busy or failing, or our own session was refused.
	"ThrottlingException":                    {NotTaken, "the bus is throttling writes", ""},
	"Throttling":                             {NotTaken, "AWS is throttling requests", ""},
	"ProvisionedThroughputExceededException": {NotTaken, "the stream is over its write throughput", ""},
	"KMSThrottlingException":                 {NotTaken, "the stream's KMS key is throttling requests", ""},
	"LimitExceededException":                 {NotTaken, "the bus or stream is over its request rate", ""}, // Kinesis: too many requests
	"InternalFailure":                        {NotTaken, "AWS had an internal error", ""},
	"InternalException":                      {NotTaken, "AWS had an internal error", ""},
	"InternalServerError":                    {NotTaken, "AWS had an internal error", ""},
	"InternalFailureException":               {NotTaken, "AWS had an internal error", ""}, // Kinesis's modelled spelling
	"ResourceInUseException":                 {NotTaken, "the stream is busy being created or updated", ""},
	"ServiceUnavailable":                     {NotTaken, "the AWS service is unavailable", ""},
	"ServiceUnavailableException":            {NotTaken, "the AWS service is unavailable", ""},
	"RequestTimeout":                         {NotTaken, "the request timed out on the AWS side", ""},
	"RequestTimeoutException":                {NotTaken, "the request timed out on the AWS side", ""},
	"RequestExpired":                         {NotTaken, "AWS found our request expired, which points at our clock", onOurSide},
	"RequestTimeTooSkewed":                   {NotTaken, "AWS found our request's time too far off, which points at our clock", onOurSide},
	"ExpiredToken":                           {NotTaken, "our own session had expired", onOurSide},
	"ExpiredTokenException":                  {NotTaken, "our own session had expired", onOurSide},
	"InvalidClientTokenId":                   {NotTaken, "AWS did not recognise our own credentials", onOurSide},
	"UnrecognizedClientException":            {NotTaken, "AWS did not recognise our own credentials", onOurSide},
	"SignatureDoesNotMatch":                  {NotTaken, "AWS refused our own request signature", onOurSide},
	"InvalidSignatureException":              {NotTaken, "AWS refused our own request signature", onOurSide},
	"IDPCommunicationError":                  {NotTaken, "STS could not reach the identity provider", ""},
	"IDPRejectedClaim":                       {NotTaken, "STS refused our own web identity", onOurSide},
	"InvalidIdentityToken":                   {NotTaken, "STS refused our own web identity token", onOurSide},

	// Rejected: something on the customer's side must change.
	"AccessDenied": {Rejected, "the role could not be assumed",
		"check that the role's trust policy lets our principal assume it with this destination's ExternalId"},
	"AccessDeniedException": {Rejected, "the bus refused the write: the role's permissions do not allow it",
		"check the role's permissions policy"},
	"ResourceNotFoundException": {Rejected, "the bus or stream does not exist",
		"check the ARN on the destination"},
	"NotFoundException": {Rejected, "the bus or stream does not exist",
		"check the ARN on the destination"},
	"KMSAccessDeniedException": {Rejected, "the stream's KMS key refused the write",
		"allow kms:GenerateDataKey on the key for the role"},
	"KMSDisabledException": {Rejected, "the stream's KMS key is disabled",
		"enable the key, or change the stream's encryption"},
	"KMSNotFoundException": {Rejected, "the stream's KMS key does not exist",
		"check the key set on the stream's encryption"},
	"KMSInvalidStateException": {Rejected, "the stream's KMS key is not in a usable state",
		"check that the key is enabled and not pending deletion"},
	"KMSOptInRequired": {Rejected, "the stream's AWS account is not subscribed to KMS",
		"subscribe the account to KMS, or change the stream's encryption"},
	"InvalidArgumentException": {Rejected, "the bus refused the event as invalid",
		"the event may be too large or malformed for the bus"},
	"ValidationException": {Rejected, "the bus refused the request as invalid",
		"the event may be too large or malformed for the bus"},
	"ValidationError": {Rejected, "AWS refused the request as invalid",
		"check the role and bus or stream ARNs on the destination"},
	"MalformedPolicyDocument": {Rejected, "STS refused the session policy for this destination",
		"check the bus or stream ARN on the destination"},
	"PackedPolicyTooLarge": {Rejected, "STS refused the session: its policies and tags are too large",
		"check the tags on the role"},
	"RegionDisabledException": {Rejected, "STS is not activated in the destination's region for the role's AWS account",
		"activate the region under the account's IAM settings (STS endpoints)"},
}

// awsVerdict classifies an AWS API error by its code. status is the HTTP status of
// the response that carried it, 0 when unknown.
func awsVerdict(apiErr smithy.APIError, status int) verdict {
	code := apiErr.ErrorCode()
	detail := codeDetail(code, apiErr.ErrorMessage())
	if r, ok := awsRules[code]; ok {
		return verdict{code: code, outcome: r.outcome(detail)}
	}
	// The SDK's own list of throttle codes covers services and spellings we do not name.
	if _, ok := retry.DefaultThrottleErrorCodes[code]; ok {
		return verdict{code: code, outcome: notTaken("AWS is throttling requests", detail, "")}
	}
	if status != 0 {
		detail += ", HTTP " + strconv.Itoa(status)
	}
	switch {
	case status == 429:
		return verdict{code: code, outcome: notTaken("AWS is throttling requests", detail, "")}
	case status >= 500:
		return verdict{code: code, outcome: notTaken("AWS answered with a server error", detail, "")}
	case status >= 400:
		return verdict{code: code, outcome: rejected("the bus refused the write", detail, "")}
	}
	return verdict{code: code, outcome: notTaken("AWS answered with an error code we do not know", detail, "")}
}

func (r rule) outcome(detail string) Outcome {
	if r.class == Rejected {
		return rejected(r.words, detail, r.fix)
	}
	return notTaken(r.words, detail, r.fix)
}

// entryError is one failed EventBridge entry: PutEvents answered 200 with
// FailedEntryCount 1, so there is no smithy error, only the entry's code and message.
type entryError struct {
	code    string
	message string
}

func (e *entryError) Error() string {
	return "eventbridge entry error " + codeDetail(e.code, e.message)
}

// EntryError is the error for a failed PutEvents entry (a 200 with FailedEntryCount 1):
// ThrottlingException and InternalFailure are not taken; any other code rejects the
// event, as the contract says of per-entry errors. Code reports the entry's code.
func EntryError(code, message string) error {
	e := &entryError{code: code, message: message}
	o := entryVerdict(e).outcome
	return &Error{Class: o.Class, Message: o.Message, Err: e}
}

func entryVerdict(e *entryError) verdict {
	detail := codeDetail(e.code, e.message)
	switch e.code {
	case "ThrottlingException", "InternalFailure":
		return verdict{code: e.code, outcome: awsRules[e.code].outcome(detail)}
	}
	// A code we know as a rejection keeps its words (which permission, which key).
	if r, ok := awsRules[e.code]; ok && r.class == Rejected {
		return verdict{code: e.code, outcome: r.outcome(detail)}
	}
	return verdict{code: e.code, outcome: rejected("the bus refused the event and did not write it", detail, "")}
}
