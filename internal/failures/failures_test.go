package failures

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	kinesistypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	ststypes "github.com/aws/aws-sdk-go-v2/service/sts/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/googleapis/gax-go/v2/apierror"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const busARN = "arn:aws:events:eu-west-1:123456789012:event-bus/orders"

// testCase is one error and what Classify and Code must say about it.
type testCase struct {
	name     string
	err      error
	class    Class
	code     string   // what Code(err) returns
	contains []string // substrings the card's sentence must carry
}

func check(t *testing.T, tc testCase) {
	t.Helper()
	got := Classify(tc.err)
	if got.Class != tc.class {
		t.Errorf("Classify(%v).Class = %q, want %q (sentence %q)", tc.err, got.Class, tc.class, got.Message)
	}
	for _, s := range tc.contains {
		if !strings.Contains(got.Message, s) {
			t.Errorf("sentence %q does not contain %q", got.Message, s)
		}
	}
	switch tc.class {
	case NotTaken:
		if !strings.HasPrefix(got.Message, "did not take the event") {
			t.Errorf("not-taken sentence %q does not start with %q", got.Message, "did not take the event")
		}
	case Rejected:
		if strings.HasPrefix(got.Message, "did not take the event") {
			t.Errorf("rejected sentence %q reads like not taken", got.Message)
		}
	}
	if c := Code(tc.err); c != tc.code {
		t.Errorf("Code(%v) = %q, want %q", tc.err, c, tc.code)
	}
}

func run(t *testing.T, cases []testCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { check(t, tc) })
	}
}

// response is an HTTP response with only a status, as the SDK's errors carry it.
func response(status int) *smithyhttp.Response {
	return &smithyhttp.Response{Response: &http.Response{StatusCode: status}}
}

// sdkError is an error shaped as the AWS SDK returns it from an operation:
// OperationError → awshttp.ResponseError (status, request id) → the API error.
func sdkError(service, operation string, status int, err error) error {
	return &smithy.OperationError{ServiceID: service, OperationName: operation, Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: response(status), Err: err},
		RequestID:     "4f0c1a2b-req",
	}}
}

func TestNilIsDelivered(t *testing.T) {
	got := Classify(nil)
	if got.Class != Delivered || got.Message == "" {
		t.Fatalf("Classify(nil) = %+v, want delivered with a sentence", got)
	}
	if Code(nil) != "" {
		t.Fatalf("Code(nil) = %q, want empty", Code(nil))
	}
}

// awsCodes is every AWS code the contract and the brief name, with its class, the
// HTTP status AWS answers it with, and words its sentence must carry.
var awsCodes = []struct {
	code   string
	class  Class
	status int
	words  string
}{
	{"ThrottlingException", NotTaken, 400, "the bus is throttling writes"},
	{"Throttling", NotTaken, 400, "throttling"},
	{"ProvisionedThroughputExceededException", NotTaken, 400, "write throughput"},
	{"KMSThrottlingException", NotTaken, 400, "KMS key is throttling"},
	{"LimitExceededException", NotTaken, 400, "request rate"},
	{"InternalFailure", NotTaken, 500, "internal error"},
	{"InternalFailureException", NotTaken, 500, "internal error"},
	{"InternalException", NotTaken, 500, "internal error"},
	{"InternalServerError", NotTaken, 500, "internal error"},
	{"ServiceUnavailable", NotTaken, 503, "unavailable"},
	{"ServiceUnavailableException", NotTaken, 503, "unavailable"},
	{"RequestTimeout", NotTaken, 400, "timed out"},
	{"RequestTimeoutException", NotTaken, 400, "timed out"},
	{"RequestExpired", NotTaken, 400, "our clock"},
	{"RequestTimeTooSkewed", NotTaken, 403, "our clock"},
	{"ExpiredToken", NotTaken, 400, "our own session"},
	{"ExpiredTokenException", NotTaken, 400, "our own session"},
	{"InvalidClientTokenId", NotTaken, 403, "our own credentials"},
	{"UnrecognizedClientException", NotTaken, 400, "our own credentials"},
	{"SignatureDoesNotMatch", NotTaken, 403, "our own request signature"},
	{"InvalidSignatureException", NotTaken, 400, "our own request signature"},
	{"IDPCommunicationError", NotTaken, 400, "identity provider"},
	{"IDPRejectedClaim", NotTaken, 403, "our own web identity"},
	{"InvalidIdentityToken", NotTaken, 400, "our own web identity"},
	{"ResourceInUseException", NotTaken, 400, "busy"},
	{"TooManyRequestsException", NotTaken, 400, "throttling"}, // from the SDK's throttle list
	{"SlowDown", NotTaken, 503, "throttling"},                 // from the SDK's throttle list

	{"AccessDenied", Rejected, 403, "trust policy"},
	{"AccessDeniedException", Rejected, 400, "the role's permissions do not allow it"},
	{"ResourceNotFoundException", Rejected, 400, "the bus or stream does not exist"},
	{"NotFoundException", Rejected, 404, "the bus or stream does not exist"},
	{"KMSAccessDeniedException", Rejected, 400, "allow kms:GenerateDataKey on the key for the role"},
	{"KMSDisabledException", Rejected, 400, "KMS key is disabled"},
	{"KMSNotFoundException", Rejected, 400, "KMS key does not exist"},
	{"KMSInvalidStateException", Rejected, 400, "not in a usable state"},
	{"KMSOptInRequired", Rejected, 400, "not subscribed to KMS"},
	{"InvalidArgumentException", Rejected, 400, "too large or malformed"},
	{"ValidationException", Rejected, 400, "too large or malformed"},
	{"ValidationError", Rejected, 400, "invalid"},
	{"MalformedPolicyDocument", Rejected, 400, "session policy"},
	{"PackedPolicyTooLarge", Rejected, 400, "too large"},
	{"RegionDisabledException", Rejected, 403, "not activated"},
}

// TestAWSCodes classifies every code four ways: the bare API error, inside the SDK's
// OperationError, with the HTTP response the SDK attaches, and wrapped again by a sink.
// The listed code always wins over the status (AWS answers throttles with 400).
func TestAWSCodes(t *testing.T) {
	var cases []testCase
	for _, c := range awsCodes {
		msg := "the request for " + busARN + " failed"
		api := &smithy.GenericAPIError{Code: c.code, Message: msg}
		want := []string{c.code, msg, c.words}
		op := &smithy.OperationError{ServiceID: "EventBridge", OperationName: "PutEvents", Err: api}
		sdk := sdkError("EventBridge", "PutEvents", c.status, api)
		cases = append(cases,
			testCase{c.code + "/plain", api, c.class, c.code, want},
			testCase{c.code + "/operation", op, c.class, c.code, want},
			testCase{c.code + "/sdk", sdk, c.class, c.code, want},
			testCase{c.code + "/wrapped", fmt.Errorf("eventbridge sink: put events: %w", sdk), c.class, c.code, want},
		)
	}
	run(t, cases)
}

func TestAWSSentencesSayWhatToFix(t *testing.T) {
	run(t, []testCase{
		{"access denied exception", &smithy.GenericAPIError{Code: "AccessDeniedException",
			Message: "User: arn:aws:sts::123456789012:assumed-role/relay/mercamap-acct1 is not authorized to perform: events:PutEvents on resource: " + busARN},
			Rejected, "AccessDeniedException", []string{
				"the bus or stream refused the write: the role's permissions do not allow it (AccessDeniedException: User: ",
				busARN, "— check the role's permissions policy"}},
		{"throttle", &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded"},
			NotTaken, "ThrottlingException", []string{
				"did not take the event: the bus is throttling writes (ThrottlingException: Rate exceeded); retrying with backoff"}},
		{"throttle without message", &smithy.GenericAPIError{Code: "ThrottlingException"},
			NotTaken, "ThrottlingException", []string{"(ThrottlingException); retrying with backoff"}},
		{"not found", &smithy.GenericAPIError{Code: "ResourceNotFoundException", Message: "Event bus orders does not exist."},
			Rejected, "ResourceNotFoundException", []string{
				"the bus or stream does not exist (ResourceNotFoundException: Event bus orders does not exist.) — check the ARN"}},
		{"kms denied", &smithy.GenericAPIError{Code: "KMSAccessDeniedException", Message: "key arn:aws:kms:eu-west-1:123456789012:key/k1"},
			Rejected, "KMSAccessDeniedException", []string{
				"the stream's KMS key refused the write (KMSAccessDeniedException: key arn:aws:kms:eu-west-1:123456789012:key/k1) — allow kms:GenerateDataKey on the key for the role"}},
		{"assume role denied", &smithy.GenericAPIError{Code: "AccessDenied", Message: "not authorized to perform: sts:AssumeRole on resource: arn:aws:iam::123456789012:role/relay"},
			Rejected, "AccessDenied", []string{"the role could not be assumed", "arn:aws:iam::123456789012:role/relay", "ExternalId"}},
	})
}

// TestAWSModelledExceptions uses the SDK's own exception types, proving their
// ErrorCode matches the names in the table.
func TestAWSModelledExceptions(t *testing.T) {
	streamMsg := aws.String("Rate exceeded for shard shardId-000000000000 in stream orders")
	run(t, []testCase{
		{"kinesis throughput", sdkError("Kinesis", "PutRecord", 400,
			&kinesistypes.ProvisionedThroughputExceededException{Message: streamMsg}),
			NotTaken, "ProvisionedThroughputExceededException", []string{"stream orders"}},
		{"kinesis kms throttling", sdkError("Kinesis", "PutRecord", 400, &kinesistypes.KMSThrottlingException{}),
			NotTaken, "KMSThrottlingException", nil},
		{"kinesis internal failure", sdkError("Kinesis", "PutRecord", 500, &kinesistypes.InternalFailureException{}),
			NotTaken, "InternalFailureException", nil},
		{"kinesis kms denied", sdkError("Kinesis", "PutRecord", 400, &kinesistypes.KMSAccessDeniedException{}),
			Rejected, "KMSAccessDeniedException", []string{"kms:GenerateDataKey"}},
		{"kinesis kms disabled", sdkError("Kinesis", "PutRecord", 400, &kinesistypes.KMSDisabledException{}),
			Rejected, "KMSDisabledException", nil},
		{"kinesis kms not found", sdkError("Kinesis", "PutRecord", 400, &kinesistypes.KMSNotFoundException{}),
			Rejected, "KMSNotFoundException", nil},
		{"kinesis kms invalid state", sdkError("Kinesis", "PutRecord", 400, &kinesistypes.KMSInvalidStateException{}),
			Rejected, "KMSInvalidStateException", nil},
		{"kinesis kms opt in", sdkError("Kinesis", "PutRecord", 400, &kinesistypes.KMSOptInRequired{}),
			Rejected, "KMSOptInRequired", nil},
		{"kinesis not found", sdkError("Kinesis", "PutRecord", 400, &kinesistypes.ResourceNotFoundException{Message: aws.String("Stream orders not found")}),
			Rejected, "ResourceNotFoundException", []string{"Stream orders not found"}},
		{"kinesis invalid argument", sdkError("Kinesis", "PutRecord", 400, &kinesistypes.InvalidArgumentException{}),
			Rejected, "InvalidArgumentException", nil},
		{"sts expired token", sdkError("STS", "AssumeRole", 400, &ststypes.ExpiredTokenException{}),
			NotTaken, "ExpiredTokenException", []string{"our own session"}},
		{"sts region disabled", sdkError("STS", "AssumeRole", 403, &ststypes.RegionDisabledException{}),
			Rejected, "RegionDisabledException", nil},
		{"sts malformed policy", sdkError("STS", "AssumeRole", 400, &ststypes.MalformedPolicyDocumentException{}),
			Rejected, "MalformedPolicyDocument", nil},
		{"sts packed policy", sdkError("STS", "AssumeRole", 400, &ststypes.PackedPolicyTooLargeException{}),
			Rejected, "PackedPolicyTooLarge", nil},
		{"sts idp", sdkError("STS", "AssumeRole", 400, &ststypes.IDPCommunicationErrorException{}),
			NotTaken, "IDPCommunicationError", nil},
		{"sdk retries exhausted", &smithy.OperationError{ServiceID: "Kinesis", OperationName: "PutRecord",
			Err: &retry.MaxAttemptsError{Attempt: 3, Err: &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
				Response: response(400), Err: &kinesistypes.ProvisionedThroughputExceededException{Message: streamMsg}}}}},
			NotTaken, "ProvisionedThroughputExceededException", nil},
	})
}

// TestAWSUnknownCodeFollowsStatus: a code not in the table is rejected on a 4xx and
// not taken on a 429, a 5xx or no status at all.
func TestAWSUnknownCodeFollowsStatus(t *testing.T) {
	api := &smithy.GenericAPIError{Code: "NotAuthorizedForSourceException", Message: "source com.mercamap"}
	run(t, []testCase{
		{"4xx", sdkError("EventBridge", "PutEvents", 400, api), Rejected, "NotAuthorizedForSourceException",
			[]string{"the bus refused the write", "NotAuthorizedForSourceException: source com.mercamap", "HTTP 400"}},
		{"403", sdkError("EventBridge", "PutEvents", 403, api), Rejected, "NotAuthorizedForSourceException", []string{"HTTP 403"}},
		{"429", sdkError("EventBridge", "PutEvents", 429, api), NotTaken, "NotAuthorizedForSourceException", []string{"throttling", "HTTP 429"}},
		{"500", sdkError("EventBridge", "PutEvents", 500, api), NotTaken, "NotAuthorizedForSourceException", []string{"server error", "HTTP 500"}},
		{"503", sdkError("EventBridge", "PutEvents", 503, api), NotTaken, "NotAuthorizedForSourceException", []string{"HTTP 503"}},
		{"no status", api, NotTaken, "NotAuthorizedForSourceException", []string{"error code we do not know", "NotAuthorizedForSourceException"}},
		{"wrapped 4xx", fmt.Errorf("send: %w", sdkError("EventBridge", "PutEvents", 400, api)), Rejected, "NotAuthorizedForSourceException", nil},
	})
}

// TestHTTPStatusWithoutCode: a response whose body did not deserialize to an API error.
func TestHTTPStatusWithoutCode(t *testing.T) {
	bare := func(status int) error {
		return &smithyhttp.ResponseError{Response: response(status), Err: errors.New("failed to decode response body")}
	}
	run(t, []testCase{
		{"429", bare(429), NotTaken, "HTTP 429", []string{"throttling", "HTTP 429"}},
		{"500", bare(500), NotTaken, "HTTP 500", []string{"server error", "HTTP 500"}},
		{"502", bare(502), NotTaken, "HTTP 502", []string{"HTTP 502"}},
		{"503", bare(503), NotTaken, "HTTP 503", []string{"HTTP 503"}},
		{"504 in the sdk shape", &smithy.OperationError{ServiceID: "Kinesis", OperationName: "PutRecord",
			Err: &awshttp.ResponseError{ResponseError: bare(504).(*smithyhttp.ResponseError)}}, NotTaken, "HTTP 504", nil},
		{"408", bare(408), NotTaken, "HTTP 408", []string{"timed out"}},
		{"401", bare(401), NotTaken, "HTTP 401", []string{"our own credentials"}},
		{"400", bare(400), Rejected, "HTTP 400", []string{"the bus refused the write (HTTP 400)"}},
		{"403", bare(403), Rejected, "HTTP 403", []string{"permissions policy"}},
		{"404", bare(404), Rejected, "HTTP 404", []string{"not found", "ARN"}},
		{"413", bare(413), Rejected, "HTTP 413", []string{"too large"}},
		{"wrapped 503", fmt.Errorf("kinesis sink: %w", bare(503)), NotTaken, "HTTP 503", nil},
	})

	// A response error without a response has no status (its Error method would
	// panic, so only the lookup is checked).
	if got := httpStatus(&smithyhttp.ResponseError{}); got != 0 {
		t.Errorf("httpStatus(no response) = %d, want 0", got)
	}
	if got := httpStatus(&smithyhttp.ResponseError{Response: &smithyhttp.Response{}}); got != 0 {
		t.Errorf("httpStatus(no http response) = %d, want 0", got)
	}
}

// grpcCodes is every gRPC code the contract and the brief name.
var grpcCodes = []struct {
	code  codes.Code
	name  string
	class Class
	words string
}{
	{codes.Unavailable, "UNAVAILABLE", NotTaken, "unavailable"},
	{codes.ResourceExhausted, "RESOURCE_EXHAUSTED", NotTaken, "quota"},
	{codes.Internal, "INTERNAL", NotTaken, "internal error"},
	{codes.DeadlineExceeded, "DEADLINE_EXCEEDED", NotTaken, "did not answer in time"},
	{codes.Aborted, "ABORTED", NotTaken, "aborted"},
	{codes.Unknown, "UNKNOWN", NotTaken, "unknown error"},
	{codes.Canceled, "CANCELLED", NotTaken, "cancelled"},
	{codes.Unauthenticated, "UNAUTHENTICATED", NotTaken, "our own service account"},
	{codes.DataLoss, "DATA_LOSS", NotTaken, "Pub/Sub answered with an error"},

	{codes.PermissionDenied, "PERMISSION_DENIED", Rejected, "grant roles/pubsub.publisher on the topic"},
	{codes.NotFound, "NOT_FOUND", Rejected, "the topic does not exist"},
	{codes.InvalidArgument, "INVALID_ARGUMENT", Rejected, "too large or malformed"},
	{codes.FailedPrecondition, "FAILED_PRECONDITION", Rejected, "topic's settings"},
	{codes.OutOfRange, "OUT_OF_RANGE", Rejected, "out of range"},
	{codes.AlreadyExists, "ALREADY_EXISTS", Rejected, "conflict"},
	{codes.Unimplemented, "UNIMPLEMENTED", Rejected, "does not support"},
}

// TestGRPCCodes classifies every code plain, wrapped once and twice, and as the
// Google client libraries return it (apierror). The sentence keeps the status's own
// message, not the wrappers' text.
func TestGRPCCodes(t *testing.T) {
	var cases []testCase
	for _, c := range grpcCodes {
		msg := "projects/shop-prod/topics/orders: " + strings.ToLower(c.name)
		st := status.Error(c.code, msg)
		want := []string{c.name + ": " + msg, c.words}
		api, ok := apierror.FromError(st)
		if !ok {
			t.Fatalf("apierror.FromError(%v) failed", st)
		}
		cases = append(cases,
			testCase{c.name + "/plain", st, c.class, c.name, want},
			testCase{c.name + "/wrapped", fmt.Errorf("publish: %w", st), c.class, c.name, want},
			testCase{c.name + "/twice", fmt.Errorf("pubsub sink: %w", fmt.Errorf("publish: %w", st)), c.class, c.name, want},
			testCase{c.name + "/apierror", fmt.Errorf("publish: %w", api), c.class, c.name, want},
		)
	}
	run(t, cases)

	got := Classify(fmt.Errorf("pubsub sink: publish: %w", status.Error(codes.Unavailable, "down")))
	if strings.Contains(got.Message, "pubsub sink") {
		t.Errorf("sentence %q carries the wrapper's text instead of the status message", got.Message)
	}
}

// TestGRPCOurOwnProjectRefused: PERMISSION_DENIED whose ErrorInfo says the API is off
// in our own project is "our own project refused": not taken. Other reasons reject.
func TestGRPCOurOwnProjectRefused(t *testing.T) {
	withReason := func(reason string) error {
		st, err := status.New(codes.PermissionDenied, "Cloud Pub/Sub API has not been used in project 42").
			WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "googleapis.com"})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Errorf("publish: %w", st.Err())
	}
	run(t, []testCase{
		{"service disabled", withReason("SERVICE_DISABLED"), NotTaken, "PERMISSION_DENIED",
			[]string{"our own project", "PERMISSION_DENIED SERVICE_DISABLED"}},
		{"billing disabled", withReason("BILLING_DISABLED"), NotTaken, "PERMISSION_DENIED", []string{"our own project"}},
		{"iam denied", withReason("IAM_PERMISSION_DENIED"), Rejected, "PERMISSION_DENIED", []string{"roles/pubsub.publisher"}},
	})
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestRealNetworkErrors classifies errors produced by real dials and requests.
func TestRealNetworkErrors(t *testing.T) {
	addr := closedAddr(t)

	_, dialErr := net.Dial("tcp", addr)
	if dialErr == nil {
		t.Fatalf("dial %s succeeded", addr)
	}
	_, httpErr := http.Get("http://" + addr + "/")
	if httpErr == nil {
		t.Fatalf("GET %s succeeded", addr)
	}
	_, timeoutErr := (&net.Dialer{Timeout: time.Nanosecond}).Dial("tcp", "192.0.2.1:443")
	if timeoutErr == nil {
		t.Fatal("dial with a 1ns timeout succeeded")
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, deadlineErr := http.DefaultClient.Do(req)
	if deadlineErr == nil {
		t.Fatal("request past its deadline succeeded")
	}
	canceledCtx, stop := context.WithCancel(context.Background())
	stop()
	_, canceledErr := (&net.Dialer{}).DialContext(canceledCtx, "tcp", addr)
	if canceledErr == nil {
		t.Fatal("dial with a cancelled context succeeded")
	}

	run(t, []testCase{
		{"connection refused", dialErr, NotTaken, "network", []string{"connection was refused", addr}},
		{"connection refused over http", httpErr, NotTaken, "network", []string{"connection was refused"}},
		{"connection refused in the sdk shape", &smithy.OperationError{ServiceID: "EventBridge", OperationName: "PutEvents",
			Err: &smithyhttp.RequestSendError{Err: httpErr}}, NotTaken, "network", []string{addr}},
		{"dial timeout", timeoutErr, NotTaken, "timeout", []string{"did not answer in time", "event_id"}},
		{"request past its deadline", deadlineErr, NotTaken, "timeout", nil},
		{"dial cancelled", canceledErr, NotTaken, "canceled", []string{"cancelled"}},
	})
}

func TestNetworkAndContextErrors(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	run(t, []testCase{
		{"deadline", context.DeadlineExceeded, NotTaken, "timeout", []string{"(timeout)"}},
		{"deadline wrapped", fmt.Errorf("put record: %w", context.DeadlineExceeded), NotTaken, "timeout", nil},
		{"deadline in the sdk shape", &smithy.OperationError{ServiceID: "Kinesis", OperationName: "PutRecord",
			Err: &aws.RequestCanceledError{Err: context.DeadlineExceeded}}, NotTaken, "timeout", nil},
		{"os deadline", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), NotTaken, "timeout", nil},
		{"canceled", context.Canceled, NotTaken, "canceled", []string{"shuts down", "retried"}},
		{"canceled in the sdk shape", &smithy.OperationError{ServiceID: "EventBridge", OperationName: "PutEvents",
			Err: &smithy.CanceledError{Err: context.Canceled}}, NotTaken, "canceled", nil},
		{"connection reset", fmt.Errorf("put: %w", reset), NotTaken, "network", []string{"broken", "connection reset"}},
		{"bare reset", syscall.ECONNRESET, NotTaken, "network", nil},
		{"bare refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), NotTaken, "network", []string{"refused"}},
		{"unexpected eof", fmt.Errorf("read body: %w", io.ErrUnexpectedEOF), NotTaken, "network", []string{"closed before its answer"}},
		{"dns", &net.DNSError{Err: "no such host", Name: "events.eu-west-1.amazonaws.com", IsNotFound: true},
			NotTaken, "network", []string{"did not resolve", "events.eu-west-1.amazonaws.com"}},
		{"url error", &url.Error{Op: "Post", URL: "https://events.eu-west-1.amazonaws.com/", Err: errors.New("tls: handshake failure")},
			NotTaken, "network", []string{"could not reach the bus"}},
		{"request send", &smithyhttp.RequestSendError{Err: errors.New("proxy refused")}, NotTaken, "network", nil},
	})
}

func TestEntryError(t *testing.T) {
	run(t, []testCase{
		{"throttling", EntryError("ThrottlingException", "Rate exceeded"), NotTaken, "ThrottlingException",
			[]string{"throttling", "ThrottlingException: Rate exceeded"}},
		{"internal failure", EntryError("InternalFailure", "Internal service error"), NotTaken, "InternalFailure",
			[]string{"internal error", "InternalFailure: Internal service error"}},
		{"access denied", EntryError("AccessDeniedException", "not authorized on "+busARN), Rejected, "AccessDeniedException",
			[]string{"the role's permissions do not allow it", busARN, "permissions policy"}},
		{"kms denied", EntryError("KMSAccessDeniedException", "key k1"), Rejected, "KMSAccessDeniedException",
			[]string{"kms:GenerateDataKey"}},
		{"malformed detail", EntryError("MalformedDetail", "Detail is malformed."), Rejected, "MalformedDetail",
			[]string{"the bus refused the event", "MalformedDetail: Detail is malformed."}},
		{"invalid argument", EntryError("InvalidArgument", "Parameter Detail is not valid."), Rejected, "InvalidArgument", nil},
		{"not authorized for source", EntryError("NotAuthorizedForSourceException", "com.mercamap"), Rejected,
			"NotAuthorizedForSourceException", []string{"com.mercamap"}},
		// Per-entry errors other than throttling and internal failure reject, even codes
		// that are transient as a whole-request error.
		{"limit exceeded entry", EntryError("LimitExceededException", "limit"), Rejected, "LimitExceededException", nil},
		{"no code", EntryError("", ""), NotTaken, "unreadable", []string{"unreadable answer", "neither an EventId nor an ErrorCode"}},
		{"wrapped", fmt.Errorf("eventbridge sink: %w", EntryError("MalformedDetail", "bad")), Rejected, "MalformedDetail", nil},
		{"wrapped throttling", fmt.Errorf("eventbridge sink: %w", EntryError("ThrottlingException", "")), NotTaken, "ThrottlingException", nil},
	})
}

// TestPutEventsAnswer: a 200 is delivered only with exactly one entry carrying an
// EventId; an entry's ErrorCode is classified by it; anything else is not taken.
func TestPutEventsAnswer(t *testing.T) {
	ok := PutEventsEntry{EventID: "e1"}
	if err := PutEventsAnswer(0, []PutEventsEntry{ok}); err != nil {
		t.Fatalf("one entry with an EventId: %v, want delivered", err)
	}
	run(t, []testCase{
		{"no entries", PutEventsAnswer(0, nil), NotTaken, "unreadable", []string{"unreadable answer", "no entry", "may have landed"}},
		{"two entries", PutEventsAnswer(0, []PutEventsEntry{ok, ok}), NotTaken, "unreadable", []string{"2 entries"}},
		{"neither", PutEventsAnswer(0, []PutEventsEntry{{}}), NotTaken, "unreadable", []string{"neither an EventId nor an ErrorCode"}},
		{"neither, counted failed", PutEventsAnswer(1, []PutEventsEntry{{ErrorMessage: "x"}}), NotTaken, "unreadable", nil},
		{"EventId but counted failed", PutEventsAnswer(1, []PutEventsEntry{ok}), NotTaken, "unreadable", []string{"FailedEntryCount 1"}},
		{"code with count 0", PutEventsAnswer(0, []PutEventsEntry{{ErrorCode: "MalformedDetail", ErrorMessage: "bad"}}), Rejected,
			"MalformedDetail", []string{"MalformedDetail: bad"}},
		{"code beside an EventId", PutEventsAnswer(0, []PutEventsEntry{{EventID: "e1", ErrorCode: "ThrottlingException"}}), NotTaken,
			"ThrottlingException", nil},
		{"internal failure", PutEventsAnswer(1, []PutEventsEntry{{ErrorCode: "InternalFailure"}}), NotTaken, "InternalFailure", nil},
	})
}

// TestUnreadableBody: a body the SDK could not read is an unreadable answer after a 2xx;
// after an error status, the status decides.
func TestUnreadableBody(t *testing.T) {
	de := &smithy.DeserializationError{Err: errors.New("unexpected end of JSON input")}
	run(t, []testCase{
		{"200", sdkError("EventBridge", "PutEvents", 200, de), NotTaken, "unreadable", []string{"unreadable answer", "unexpected end of JSON input"}},
		{"no status", de, NotTaken, "unreadable", nil},
		{"403", sdkError("EventBridge", "PutEvents", 403, de), Rejected, "HTTP 403", nil},
		{"503", sdkError("EventBridge", "PutEvents", 503, de), NotTaken, "HTTP 503", nil},
	})
}

// TestExplicitClassWins: a producer that already knows the class (label check, probe)
// keeps it and its sentence through wrapping, even over a typed code underneath.
func TestExplicitClassWins(t *testing.T) {
	label := "the topic is labelled for another account (mercamap-account=acct2) — set the label to acct1"
	probe := "the role let in a wrong ExternalId, so any account could use it — add the sts:ExternalId condition to the trust policy"
	throttle := &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded"}
	denied := &smithy.GenericAPIError{Code: "AccessDenied", Message: "not authorized"}
	for _, tc := range []struct {
		name    string
		err     error
		class   Class
		message string
		code    string
	}{
		{"rejected wrapped", fmt.Errorf("labelcheck: %w", NewRejected(label, nil)), Rejected, label, ""},
		{"rejected over a throttle", fmt.Errorf("assume: %w", NewRejected(probe, throttle)), Rejected, probe, "ThrottlingException"},
		{"not taken wrapped", fmt.Errorf("x: %w", NewNotTaken("did not take the event: the label could not be read yet", nil)), NotTaken,
			"did not take the event: the label could not be read yet", ""},
		{"not taken over access denied", fmt.Errorf("x: %w", NewNotTaken("did not take the event: STS is not answering", denied)), NotTaken,
			"did not take the event: STS is not answering", "AccessDenied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(tc.err)
			if got.Class != tc.class || got.Message != tc.message {
				t.Errorf("Classify = %+v, want {%s %q}", got, tc.class, tc.message)
			}
			if c := Code(tc.err); c != tc.code {
				t.Errorf("Code = %q, want %q", c, tc.code)
			}
		})
	}
}

// TestNoStringMatching: errors whose text names a code, but which carry no typed
// code, are not recognised — never classified by their words.
func TestNoStringMatching(t *testing.T) {
	for _, text := range []string{
		"ThrottlingException: Rate exceeded",
		"AccessDenied",
		"AccessDeniedException: User is not authorized to perform: events:PutEvents",
		"api error ResourceNotFoundException: Event bus orders does not exist.",
		"KMSAccessDeniedException",
		"rpc error: code = PermissionDenied desc = User not authorized",
		"PERMISSION_DENIED",
		"https response error StatusCode: 403",
		"connection refused",
		"context deadline exceeded",
	} {
		for _, err := range []error{errors.New(text), fmt.Errorf("sink: %w", errors.New(text))} {
			t.Run(err.Error(), func(t *testing.T) {
				got := Classify(err)
				if got.Class != NotTaken {
					t.Errorf("Classify(errors.New(%q)).Class = %q, want not_taken", text, got.Class)
				}
				if !strings.HasPrefix(got.Message, "did not take the event: the error was not recognised") {
					t.Errorf("sentence %q does not say the error was not recognised", got.Message)
				}
				if c := Code(err); c != "" {
					t.Errorf("Code = %q, want empty", c)
				}
			})
		}
	}
}

// TestALongServiceMessageIsCutToItsHead: a bus answering with 70 KB of text gives a
// sentence that keeps the code, a readable head of the text and what to fix.
func TestALongServiceMessageIsCutToItsHead(t *testing.T) {
	long := "User: arn:aws:sts::123456789012:assumed-role/relay/mercamap-acct is not authorized to perform: events:PutEvents " +
		strings.Repeat("because no identity-based policy allows the events:PutEvents action; ", 1000)
	got := Classify(&smithy.GenericAPIError{Code: "AccessDeniedException", Message: long})
	if got.Class != Rejected {
		t.Fatalf("class %q, want rejected", got.Class)
	}
	if n := len(got.Message); n > 1000 {
		t.Errorf("the sentence is %d bytes: want the service's %d-byte message cut to a head", n, len(long))
	}
	for _, want := range []string{"AccessDeniedException: User: arn:aws:sts::123456789012:assumed-role/relay", "…)", "events:PutEvents"} {
		if !strings.Contains(got.Message, want) {
			t.Errorf("sentence %q lacks %q", got.Message, want)
		}
	}
	if !strings.Contains(got.Message, " — ") {
		t.Errorf("sentence %q lost what to fix", got.Message)
	}
}

func TestHeadCutsCharacters(t *testing.T) {
	for in, want := range map[string]string{"héllo wörld": "héllo w…", "héllo  wörld": "héllo…", "héllo w": "héllo w", "": ""} {
		if got := Head(in, 7); got != want {
			t.Errorf("Head(%q, 7) = %q, want %q", in, got, want)
		}
	}
}

// TestThrottledNamesEveryThrottleOfOurCallerAndNothingElse: STS's own Throttling (HTTP
// 400), the JSON services' ThrottlingException, a bare 429, and none of the refusals.
func TestThrottledNamesEveryThrottleOfOurCallerAndNothingElse(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"STS Throttling, HTTP 400", sdkError("STS", "AssumeRole", 400, &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}), true},
		{"ThrottlingException", sdkError("STS", "AssumeRole", 400, &smithy.GenericAPIError{Code: "ThrottlingException"}), true},
		{"HTTP 429 with an unknown code", sdkError("STS", "AssumeRole", 429, &smithy.GenericAPIError{Code: "SomethingElse"}), true},
		{"HTTP 429 alone", &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{Response: response(429), Err: errors.New("x")}}, true},
		{"AccessDenied", sdkError("STS", "AssumeRole", 403, &smithy.GenericAPIError{Code: "AccessDenied"}), false},
		{"InternalFailure", sdkError("STS", "AssumeRole", 500, &smithy.GenericAPIError{Code: "InternalFailure"}), false},
		{"nil", nil, false},
	} {
		if got := Throttled(tt.err); got != tt.want {
			t.Errorf("%s: Throttled = %v, want %v", tt.name, got, tt.want)
		}
		if tt.want && Classify(tt.err).Class != NotTaken {
			t.Errorf("%s: classified %s, want not taken: a throttle of our principal never counts", tt.name, Classify(tt.err).Class)
		}
	}
}

func TestWaitIsWhatTheProducerSaid(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", NewNotTakenFor("did not take the event: wait", 3*time.Second, nil))
	if got := Wait(err); got != 3*time.Second {
		t.Errorf("Wait = %s, want 3s", got)
	}
	if got := Wait(NewNotTaken("did not take the event", nil)); got != 0 {
		t.Errorf("Wait of a plain not taken = %s, want 0", got)
	}
}
