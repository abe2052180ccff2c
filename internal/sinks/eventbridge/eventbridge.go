// Package eventbridge writes one event to one customer EventBridge bus: one PutEvents
// entry per event, to the bus by ARN, signed with the destination's assumed session.
// It never retries (dispatch does) and never writes with our own identity.
package eventbridge

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awspool"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

// MaxEntrySize is the largest entry a bus takes, counted the way AWS counts it (EntrySize).
const MaxEntrySize = 256 * 1024

// Options configures the Sink.
type Options struct {
	AWS          aws.Config // shared SDK settings (HTTP client, logging); its credentials are never used
	Assumer      *assume.Assumer
	IdentityName string // events are sent with Source com.<name>
	Endpoint     string // only to point at a local server
}

// Sink writes events to EventBridge buses. It is safe for concurrent use.
type Sink struct {
	source  string
	assumer *assume.Assumer
	clients assume.Clients[*eventbridge.Client] // one per region, shared by its buses
}

// New returns a Sink.
func New(o Options) *Sink {
	name := o.IdentityName
	if name == "" {
		name = destination.DefaultName
	}
	if o.AWS.HTTPClient == nil {
		o.AWS.HTTPClient = awspool.Client() // OwnConfig's, or one pool for every bus's client
	}
	s := &Sink{source: "com." + name, assumer: o.Assumer}
	s.clients.New = func(region string) *eventbridge.Client {
		return eventbridge.NewFromConfig(o.AWS, func(eo *eventbridge.Options) {
			eo.Region = region // the bus's own region, from its ARN
			// Each call is signed with its destination's session (Send), never as us.
			eo.Credentials = assume.NoCredentials
			// One attempt: the SDK's retries would hide a throttle from our accounting.
			eo.Retryer = aws.NopRetryer{}
			if o.Endpoint != "" {
				eo.BaseEndpoint = aws.String(o.Endpoint)
			}
		})
	}
	return s
}

// EntrySize is an entry's size as EventBridge counts it against MaxEntrySize: 14 bytes
// for Time plus the UTF-8 bytes of Source, DetailType and Detail (we send no Resources).
func EntrySize(source, detailType string, detail []byte) int {
	return 14 + len(source) + len(detailType) + len(detail)
}

// Send writes m to d's bus as one PutEvents entry.
func (s *Sink) Send(ctx context.Context, d destination.Destination, m destination.Message) error {
	detail := m.Body()
	if size := EntrySize(s.source, m.Type, detail); size > MaxEntrySize {
		return failures.NewRejected(fmt.Sprintf(
			"event %s is %d bytes as EventBridge counts an entry (Time, Source, DetailType and Detail), over a bus's limit of %d bytes (256 KiB): it was not sent",
			m.EventID, size, MaxEntrySize), nil)
	}
	bus, err := destination.ParseARN(d.BusARN)
	if err != nil {
		return failures.NewRejected("bus_arn "+err.Error(), nil)
	}
	creds, err := s.assumer.Credentials(ctx, d)
	if err != nil {
		return err
	}
	entry := types.PutEventsRequestEntry{
		EventBusName: aws.String(d.BusARN),
		Source:       aws.String(s.source),
		DetailType:   aws.String(m.Type),
		Detail:       aws.String(string(detail)),
	}
	if t, err := time.Parse(time.RFC3339Nano, m.CreatedAt); err == nil {
		entry.Time = aws.Time(t)
	}
	out, err := s.clients.For(bus.Region).PutEvents(ctx, &eventbridge.PutEventsInput{
		Entries: []types.PutEventsRequestEntry{entry},
	}, func(o *eventbridge.Options) { o.Credentials = assume.Session(creds) })
	if err != nil {
		err = fmt.Errorf("eventbridge PutEvents to %s: %w", d.BusARN, err)
	} else {
		// A 200 is not a delivery by itself: only one entry with an EventId is.
		entries := make([]failures.PutEventsEntry, len(out.Entries))
		for i, x := range out.Entries {
			entries[i] = failures.PutEventsEntry{EventID: aws.ToString(x.EventId),
				ErrorCode: aws.ToString(x.ErrorCode), ErrorMessage: aws.ToString(x.ErrorMessage)}
		}
		err = failures.PutEventsAnswer(out.FailedEntryCount, entries)
	}
	// A refused session (expired, or its permissions gone) is dropped: the next attempt
	// takes a fresh one, after a backoff when the role's permissions refused it; a
	// delivery ends that backoff.
	s.assumer.Report(d, creds.AccessKeyID, err)
	return err
}

// Check runs the probe and a new session now, for "send a test": the whole path,
// not a cached session.
func (s *Sink) Check(ctx context.Context, d destination.Destination) error {
	return s.assumer.Check(ctx, d)
}
