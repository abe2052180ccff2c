// Package awstest holds the AWS peers tests run against: an STS that enforces trust
// policies, an EventBridge PutEvents server, kinesalite, and a proxy that injects errors,
// all on 127.0.0.1 and speaking the real wire formats. For tests and the local sandbox
// (cmd/sandbox): the relay itself never imports it.
package awstest

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
)

// Failure is one injected error answer: an HTTP status and the AWS error code it carries.
type Failure struct {
	Status  int
	Code    string
	Message string
}

// The failures tests inject most; any other code can be written out as a Failure.
var (
	Throttling              = Failure{400, "ThrottlingException", "Rate exceeded"}
	ProvisionedThroughput   = Failure{400, "ProvisionedThroughputExceededException", "Rate exceeded for shard shardId-000000000000"}
	KMSThrottling           = Failure{400, "KMSThrottlingException", "Rate exceeded for the KMS key"}
	KMSAccessDenied         = Failure{400, "KMSAccessDeniedException", "User is not authorized to perform kms:GenerateDataKey on the stream's key"}
	AccessDeniedException   = Failure{400, "AccessDeniedException", "User is not authorized to perform this action on the resource"}
	ResourceNotFound        = Failure{400, "ResourceNotFoundException", "Resource not found"}
	InternalFailure         = Failure{500, "InternalFailure", "We encountered an internal error. Please try again."}
	STSThrottling           = Failure{400, "Throttling", "Rate exceeded"} // STS's own spelling
	STSInternalServerError  = Failure{500, "InternalFailure", "An internal error occurred"}
	STSInvalidClientTokenID = Failure{403, "InvalidClientTokenId", "The security token included in the request is invalid."}
)

// queue holds the answers injected for the next requests, oldest first.
type queue[T any] struct {
	mu   sync.Mutex
	next []T
}

func (q *queue[T]) push(n int, v T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for range n {
		q.next = append(q.next, v)
	}
}

func (q *queue[T]) pop() (T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var zero T
	if len(q.next) == 0 {
		return zero, false
	}
	v := q.next[0]
	q.next = q.next[1:]
	return v, true
}

// writeJSONError answers in the awsJson1.1 error shape (EventBridge, Kinesis).
func writeJSONError(w http.ResponseWriter, f Failure) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-ErrorType", f.Code)
	w.WriteHeader(f.Status)
	json.NewEncoder(w).Encode(map[string]string{"__type": f.Code, "message": f.Message})
}

// accessKeyID reads the signing key id out of a SigV4 Authorization header
// ("AWS4-HMAC-SHA256 Credential=AKID/date/region/service/aws4_request, …").
func accessKeyID(r *http.Request) string {
	_, cred, ok := strings.Cut(r.Header.Get("Authorization"), "Credential=")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(cred, "/")
	return id
}
