package failures

import (
	"errors"
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
	"Throttling":                             {NotTaken, "AWS is throttling the relay's own requests (STS limits AssumeRole per calling principal)", onOurSide},
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
	"AccessDeniedException": {Rejected, "the bus or stream refused the write: the role's permissions do not allow it",
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

// Throttled reports whether err is AWS throttling the caller: a throttling code (the
// table's, or the SDK's list of throttle codes) or HTTP 429. For an STS call the caller is
// our one principal, so the relay reports it (relay_sts_throttled_total); like every
// throttle it is not taken, never counted against a destination.
func Throttled(err error) bool {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		if _, ok := retry.DefaultThrottleErrorCodes[apiErr.ErrorCode()]; ok { // Throttling, ThrottlingException, …
			return true
		}
	}
	return httpStatus(err) == 429
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

// entryError is one failed EventBridge entry: PutEvents answered 200 with the entry's
// ErrorCode, so there is no smithy error, only the entry's code and message.
type entryError struct {
	code    string
	message string
}

func (e *entryError) Error() string {
	return "eventbridge entry error " + codeDetail(e.code, e.message)
}

// EntryError is the error for a PutEvents entry that carries an ErrorCode (whatever
// FailedEntryCount says): ThrottlingException and InternalFailure are not taken; any
// other code rejects the event, as the contract says of per-entry errors. An entry with
// no code is an unreadable answer: not taken. Code reports the entry's code.
func EntryError(code, message string) error {
	if code == "" {
		return unreadable("an entry with neither an EventId nor an ErrorCode", nil)
	}
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

// PutEventsEntry is one entry of a PutEvents answer, as the sink read it.
type PutEventsEntry struct {
	EventID, ErrorCode, ErrorMessage string
}

// PutEventsAnswer classifies the 200 answer to a PutEvents of one entry. A 200 is not a
// delivery by itself: nil (delivered) only for exactly one entry with an EventId, no
// ErrorCode and FailedEntryCount 0. An entry with an ErrorCode is classified by it
// (EntryError); anything else is an unreadable answer, not taken.
func PutEventsAnswer(failedEntryCount int32, entries []PutEventsEntry) error {
	switch {
	case len(entries) == 0:
		return unreadable("no entry for the one event sent", nil)
	case len(entries) > 1:
		return unreadable(strconv.Itoa(len(entries))+" entries for the one event sent", nil)
	}
	e := entries[0]
	switch {
	case e.ErrorCode != "":
		return EntryError(e.ErrorCode, e.ErrorMessage)
	case e.EventID == "":
		return unreadable("an entry with neither an EventId nor an ErrorCode", nil)
	case failedEntryCount != 0:
		return unreadable("FailedEntryCount "+strconv.Itoa(int(failedEntryCount))+" beside an entry with an EventId", nil)
	}
	return nil
}

// unreadableError is a success status whose answer does not say the event was written:
// an empty or malformed body, or a body of the wrong shape.
type unreadableError struct {
	detail string
	err    error // the SDK's deserialization error, when there was one
}

func (e *unreadableError) Error() string { return "unreadable answer: " + e.detail }
func (e *unreadableError) Unwrap() error { return e.err }

func unreadable(detail string, err error) error {
	u := &unreadableError{detail: detail, err: err}
	o := unreadableVerdict(u).outcome
	return &Error{Class: o.Class, Message: o.Message, Err: u}
}

// unreadableVerdict: not taken, since nothing says the bus refused it; the event may
// have landed, and the retry is dropped by event_id.
func unreadableVerdict(e *unreadableError) verdict {
	return verdict{code: "unreadable", outcome: notTaken(
		"the bus sent an unreadable answer, which does not say it wrote the event", e.detail,
		"retrying with backoff; the event may have landed, and receivers drop a repeat by event_id")}
}
