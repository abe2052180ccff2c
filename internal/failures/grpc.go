package failures

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// GRPCName is the canonical name of gRPC code c, as Google's APIs spell it, if it has one.
func GRPCName(c codes.Code) (string, bool) {
	name, ok := grpcNames[c]
	return name, ok
}

// grpcNames are the canonical names of gRPC codes, as Google's APIs spell them
// (codes.Code.String gives "Unavailable"; cards and metrics use "UNAVAILABLE").
var grpcNames = map[codes.Code]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELLED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// grpcRules maps Pub/Sub's gRPC codes to an outcome. Codes not listed (DATA_LOSS)
// are not taken.
var grpcRules = map[codes.Code]rule{
	codes.Unavailable:       {NotTaken, "Pub/Sub is unavailable", ""},
	codes.ResourceExhausted: {NotTaken, "Pub/Sub is over a quota or flow limit", ""},
	codes.Internal:          {NotTaken, "Pub/Sub had an internal error", ""},
	codes.DeadlineExceeded:  {NotTaken, "Pub/Sub did not answer in time", "retrying with backoff; the event may have landed, and receivers drop a repeat by event_id"},
	codes.Aborted:           {NotTaken, "Pub/Sub aborted the write", ""},
	codes.Unknown:           {NotTaken, "Pub/Sub answered with an unknown error", ""},
	codes.Canceled:          {NotTaken, "the write was cancelled before Pub/Sub answered", "it will be retried"},
	codes.Unauthenticated:   {NotTaken, "Pub/Sub refused our own service account's token", onOurSide},

	codes.PermissionDenied: {Rejected, "the topic refused the write: our service account may not publish to it",
		"grant roles/pubsub.publisher on the topic to our service account"},
	codes.NotFound: {Rejected, "the topic does not exist",
		"check the project and topic on the destination"},
	codes.InvalidArgument: {Rejected, "the topic refused the message as invalid",
		"the event may be too large or malformed for the topic"},
	codes.FailedPrecondition: {Rejected, "the topic refused the write in its current state",
		"check the topic's settings, such as its schema or message storage policy"},
	codes.OutOfRange: {Rejected, "Pub/Sub refused the write as out of range",
		"check the topic's settings"},
	codes.AlreadyExists: {Rejected, "Pub/Sub refused the write as a conflict",
		"check the topic on the destination"},
	codes.Unimplemented: {Rejected, "Pub/Sub does not support this write for the topic",
		"check the project and topic on the destination"},
}

// ourProjectReasons are google.rpc.ErrorInfo reasons that come with PERMISSION_DENIED
// when our own Google Cloud project, not the customer's topic, is refused (the API is
// off or billing lapsed there). The contract counts "our own project refused" as not taken.
var ourProjectReasons = map[string]bool{
	"SERVICE_DISABLED":   true,
	"BILLING_DISABLED":   true,
	"CONSUMER_INVALID":   true,
	"CONSUMER_SUSPENDED": true,
}

// grpcStatus finds a gRPC status anywhere in err's chain, with the status's own
// message. (status.FromError also unwraps, but replaces the message with the whole
// wrapper's text.) Errors from the Google client libraries (apierror) carry one too.
func grpcStatus(err error) (*status.Status, bool) {
	var gs interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &gs) {
		return nil, false
	}
	st := gs.GRPCStatus()
	if st == nil || st.Code() == codes.OK {
		return nil, false
	}
	return st, true
}

func grpcVerdict(st *status.Status) verdict {
	name, ok := GRPCName(st.Code())
	if !ok {
		name = "CODE " + st.Code().String()
	}
	detail := codeDetail(name, st.Message())
	if st.Code() == codes.PermissionDenied {
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && ourProjectReasons[info.GetReason()] {
				detail = codeDetail(name+" "+info.GetReason(), st.Message())
				return verdict{code: name, outcome: notTaken("Google Cloud refused our own project", detail, onOurSide)}
			}
		}
	}
	if r, ok := grpcRules[st.Code()]; ok {
		return verdict{code: name, outcome: r.outcome(detail)}
	}
	return verdict{code: name, outcome: notTaken("Pub/Sub answered with an error", detail, "")}
}
