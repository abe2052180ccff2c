// Package kinesis writes one event to one customer Kinesis stream: one PutRecord of the
// flattened body per event, keyed by store (or account) and chained per key so records
// keep their order, signed with the destination's assumed session. It never retries
// (dispatch does) and never writes with our own identity.
package kinesis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

// MaxRecordSize is the most a record may hold: data plus partition key (1 MiB).
const MaxRecordSize = 1 << 20

// maxPartitionKey is Kinesis's limit on a partition key, in Unicode characters.
const maxPartitionKey = 256

// Options configures the Sink.
type Options struct {
	AWS      aws.Config // shared SDK settings (HTTP client, logging); its credentials are never used
	Assumer  *assume.Assumer
	Endpoint string // only to point at a local server
}

// Sink writes events to Kinesis streams. It is safe for concurrent use.
type Sink struct {
	assumer *assume.Assumer
	clients assume.Clients[*kinesis.Client]

	mu   sync.Mutex
	last map[string]string // destination, stream and partition key → last sequence number written
}

// New returns a Sink.
func New(o Options) *Sink {
	if o.AWS.HTTPClient == nil {
		o.AWS.HTTPClient = awshttp.NewBuildableClient() // one connection pool for every stream's client
	}
	s := &Sink{assumer: o.Assumer, last: map[string]string{}}
	s.clients.New = func(region string, creds aws.CredentialsProvider) *kinesis.Client {
		return kinesis.NewFromConfig(o.AWS, func(ko *kinesis.Options) {
			ko.Region = region // the stream's own region, from its ARN
			ko.Credentials = creds
			// One attempt: an SDK retry would hide a throttle from our accounting and
			// could land a record after a later one.
			ko.Retryer = aws.NopRetryer{}
			if o.Endpoint != "" {
				ko.BaseEndpoint = aws.String(o.Endpoint)
			}
		})
	}
	return s
}

// Send writes m to d's stream as one record.
func (s *Sink) Send(ctx context.Context, d destination.Destination, m destination.Message) error {
	data, err := flatten(m.Body())
	if err != nil {
		return failures.NewRejected("the event's body could not be flattened into a Kinesis record: it was not sent", err)
	}
	key := partitionKey(d, m)
	if n := utf8.RuneCountInString(key); n > maxPartitionKey {
		return failures.NewRejected(fmt.Sprintf(
			"event %s names a store id of %d characters: a Kinesis partition key holds at most %d, so it was not sent",
			m.EventID, n, maxPartitionKey), nil)
	}
	if size := len(data) + len(key); size > MaxRecordSize {
		return failures.NewRejected(fmt.Sprintf(
			"event %s makes a record of %d bytes (flattened body and partition key), over a stream's limit of %d bytes (1 MiB): it was not sent",
			m.EventID, size, MaxRecordSize), nil)
	}
	stream, err := destination.ParseARN(d.StreamARN)
	if err != nil {
		return failures.NewRejected("stream_arn "+err.Error(), nil)
	}
	creds, err := s.assumer.Credentials(ctx, d)
	if err != nil {
		return err
	}
	in := &kinesis.PutRecordInput{
		StreamARN: aws.String(d.StreamARN),
		// Real Kinesis takes either; kinesalite needs the name.
		StreamName:   aws.String(strings.TrimPrefix(stream.Resource, "stream/")),
		Data:         data,
		PartitionKey: aws.String(key),
	}
	chain := d.ID + "\x00" + d.StreamARN + "\x00" + key
	if prev := s.lastSequence(chain); prev != "" {
		// Kinesis then orders this record after the previous one for its key.
		in.SequenceNumberForOrdering = aws.String(prev)
	}
	out, err := s.clients.For(d.ID, stream.Region, creds).PutRecord(ctx, in)
	if err != nil {
		if assume.SessionRefused(failures.Code(err)) {
			s.assumer.Forget(d, creds.AccessKeyID) // the next attempt takes a fresh, probed session
		}
		return fmt.Errorf("kinesis PutRecord to %s: %w", d.StreamARN, err)
	}
	s.setLastSequence(chain, aws.ToString(out.SequenceNumber))
	return nil
}

// partitionKey is the event's store id, or the account when it names none.
func partitionKey(d destination.Destination, m destination.Message) string {
	switch {
	case m.StoreID != "":
		return m.StoreID
	case m.Account != "":
		return m.Account
	}
	return d.Account
}

func (s *Sink) lastSequence(chain string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[chain]
}

func (s *Sink) setLastSequence(chain, seq string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last[chain] = seq
}

// Check runs the probe and a new session now, for "send a test": the whole path,
// not a cached session.
func (s *Sink) Check(ctx context.Context, d destination.Destination) error {
	return s.assumer.Check(ctx, d)
}
