// Package kinesis writes one event to one customer Kinesis stream: one PutRecord of the
// flattened body per event, keyed by store (or account) and chained per key so records
// keep their order, signed with the destination's assumed session. It never retries
// (dispatch does) and never writes with our own identity.
package kinesis

import (
	"container/list"
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awspool"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

// MaxRecordSize is the most a record may hold: data plus partition key (1 MiB).
const MaxRecordSize = 1 << 20

// maxPartitionKey is Kinesis's limit on a partition key, in Unicode characters.
const maxPartitionKey = 256

// DefaultSequenceMemory is how many (destination, stream, partition key) chains a Sink
// remembers the last sequence number of, by default.
const DefaultSequenceMemory = 4096

// Options configures the Sink.
type Options struct {
	AWS      aws.Config // shared SDK settings (HTTP client, logging); its credentials are never used
	Assumer  *assume.Assumer
	Endpoint string // only to point at a local server
	// SequenceMemory bounds the chains whose last sequence number is remembered
	// (DefaultSequenceMemory when 0): the least recently written is forgotten first.
	SequenceMemory int
}

// Sink writes events to Kinesis streams. It is safe for concurrent use.
type Sink struct {
	assumer *assume.Assumer
	clients assume.Clients[*kinesis.Client] // one per region, shared by its streams

	// The last sequence number of each recently written chain (destination, stream and
	// partition key), least recently written at the back. Bounded: there is one chain
	// per store id, and store ids never stop coming. A forgotten chain's next record
	// goes without SequenceNumberForOrdering, which costs no order: a destination has
	// one write in flight at a time, so its records reach Kinesis in order anyway.
	mu     sync.Mutex
	chains map[string]*list.Element // chain → its element, holding a *chain
	recent list.List
	limit  int
}

type chain struct{ key, sequence string }

// New returns a Sink.
func New(o Options) *Sink {
	if o.AWS.HTTPClient == nil {
		o.AWS.HTTPClient = awspool.Client() // OwnConfig's, or one pool for every stream's client
	}
	if o.SequenceMemory <= 0 {
		o.SequenceMemory = DefaultSequenceMemory
	}
	s := &Sink{assumer: o.Assumer, chains: map[string]*list.Element{}, limit: o.SequenceMemory}
	s.clients.New = func(region string) *kinesis.Client {
		return kinesis.NewFromConfig(o.AWS, func(ko *kinesis.Options) {
			ko.Region = region // the stream's own region, from its ARN
			// Each call is signed with its destination's session (Send), never as us.
			ko.Credentials = assume.NoCredentials
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
	out, err := s.clients.For(stream.Region).PutRecord(ctx, in,
		func(o *kinesis.Options) { o.Credentials = assume.Session(creds) })
	// A refused session is dropped (the next attempt takes a fresh one, after a backoff
	// when the role's permissions refused it); a delivery ends that backoff.
	s.assumer.Report(d, creds.AccessKeyID, err)
	if err != nil {
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

// lastSequence is the last sequence number written on key, "" when it is not remembered.
func (s *Sink) lastSequence(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.chains[key]; ok {
		return e.Value.(*chain).sequence
	}
	return ""
}

// setLastSequence remembers seq as key's last, forgetting the least recently written
// chain when the memory is full.
func (s *Sink) setLastSequence(key, seq string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.chains[key]; ok {
		e.Value.(*chain).sequence = seq
		s.recent.MoveToFront(e)
		return
	}
	if s.recent.Len() >= s.limit {
		oldest := s.recent.Back()
		delete(s.chains, s.recent.Remove(oldest).(*chain).key)
	}
	s.chains[key] = s.recent.PushFront(&chain{key: key, sequence: seq})
}

// Check runs the probe and a new session now, for "send a test": the whole path,
// not a cached session.
func (s *Sink) Check(ctx context.Context, d destination.Destination) error {
	return s.assumer.Check(ctx, d)
}
