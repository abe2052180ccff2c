package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
)

// GET /arrived of the admin API: everything each bus took so far, read back from the
// bus itself (EventBridge's entries, each stream from TRIM_HORIZON, the sandbox's
// subscriptions on the topics), as JSON or, with ?view=text, one line per event.

// What /arrived answers.
type (
	arrivedBody struct {
		EventBridge []eventBridgeEntry `json:"eventbridge"`
		Kinesis     []kinesisRecord    `json:"kinesis"`
		PubSub      []pubsubMessage    `json:"pubsub"`
	}
	eventBridgeEntry struct {
		Bus        string          `json:"bus"`
		Source     string          `json:"source"`
		DetailType string          `json:"detail_type"`
		Time       time.Time       `json:"time,omitzero"`
		Detail     json.RawMessage `json:"detail"`
	}
	kinesisRecord struct {
		Stream         string          `json:"stream"`
		PartitionKey   string          `json:"partition_key"`
		SequenceNumber string          `json:"sequence_number"`
		Data           json.RawMessage `json:"data"`
	}
	pubsubMessage struct {
		Topic      string            `json:"topic"`
		MessageID  string            `json:"message_id"`
		Attributes map[string]string `json:"attributes"`
		Data       json.RawMessage   `json:"data"`
	}
)

// arrived reads everything each bus took so far, in order: EventBridge's entries, every
// created stream from TRIM_HORIZON, and what the topics' subscriptions have delivered.
func (s *sandbox) arrived(ctx context.Context) (*arrivedBody, error) {
	body := &arrivedBody{EventBridge: []eventBridgeEntry{}, Kinesis: []kinesisRecord{}}
	for _, e := range s.events.Entries() {
		body.EventBridge = append(body.EventBridge, eventBridgeEntry{
			Bus: e.EventBusName, Source: e.Source, DetailType: e.DetailType, Time: e.Time, Detail: asJSON([]byte(e.Detail))})
	}
	s.mu.Lock()
	streams := slices.Clone(s.streams)
	s.mu.Unlock()
	for _, name := range streams {
		recs, err := s.readStream(ctx, name)
		if err != nil {
			return nil, err
		}
		body.Kinesis = append(body.Kinesis, recs...)
	}
	var err error
	if body.PubSub, err = s.pull(ctx); err != nil {
		return nil, err
	}
	return body, nil
}

// writeText is /arrived?view=text: one line per event each bus took, for people.
func (a *arrivedBody) writeText(w io.Writer) {
	type body struct {
		Type    string `json:"type"`
		EventID string `json:"event_id"`
		Data    struct {
			Metadata map[string]any `json:"metadata"`
		} `json:"data"`
	}
	read := func(raw json.RawMessage) (b body) {
		json.Unmarshal(raw, &b)
		return b
	}
	fmt.Fprintf(w, "EventBridge: %d entries\n", len(a.EventBridge))
	for i, e := range a.EventBridge {
		b := read(e.Detail)
		store := "-"
		for _, k := range []string{"store_id", "storeId"} {
			if v, ok := b.Data.Metadata[k].(string); ok {
				store = v
				break
			}
		}
		fmt.Fprintf(w, "  %3d  bus %-8s  %-13s  %-14s  store %-10s  %s\n", i+1, e.Bus[strings.LastIndex(e.Bus, "/")+1:],
			e.Source, e.DetailType, store, b.EventID)
	}
	fmt.Fprintf(w, "Kinesis: %d records\n", len(a.Kinesis))
	for i, r := range a.Kinesis {
		b := read(r.Data) // flattened: type and event_id stay at the top
		fmt.Fprintf(w, "  %3d  stream %-8s  %-14s  key %-12s  %s\n", i+1, r.Stream, b.Type, r.PartitionKey, b.EventID)
	}
	fmt.Fprintf(w, "Pub/Sub: %d messages\n", len(a.PubSub))
	for i, m := range a.PubSub {
		store := m.Attributes["store_id"]
		if store == "" {
			store = "-"
		}
		fmt.Fprintf(w, "  %3d  topic %-12s  %-14s  store_id %-10s  %s\n", i+1, m.Topic[strings.LastIndex(m.Topic, "/")+1:],
			m.Attributes["event_type"], store, m.Attributes["event_id"])
	}
}

func (s *sandbox) readStream(ctx context.Context, name string) ([]kinesisRecord, error) {
	desc, err := s.kin.DescribeStream(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)})
	if err != nil {
		return nil, fmt.Errorf("describe stream %s: %w", name, err)
	}
	var recs []kinesisRecord
	for _, sh := range desc.StreamDescription.Shards {
		it, err := s.kin.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(name),
			ShardId: sh.ShardId, ShardIteratorType: ktypes.ShardIteratorTypeTrimHorizon})
		if err != nil {
			return nil, fmt.Errorf("read stream %s: %w", name, err)
		}
		iter := it.ShardIterator
		for range 1000 { // a bound: 10 000 records a page at most
			out, err := s.kin.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				return nil, fmt.Errorf("read stream %s: %w", name, err)
			}
			for _, rec := range out.Records {
				recs = append(recs, kinesisRecord{Stream: name, PartitionKey: aws.ToString(rec.PartitionKey),
					SequenceNumber: aws.ToString(rec.SequenceNumber), Data: asJSON(rec.Data)})
			}
			iter = out.NextShardIterator
			if iter == nil || len(out.Records) == 0 && aws.ToInt64(out.MillisBehindLatest) == 0 {
				break
			}
		}
	}
	return recs, nil
}

// pull takes what is waiting on the sandbox's subscriptions, acks it and keeps it.
func (s *sandbox) pull(ctx context.Context) ([]pubsubMessage, error) {
	s.pullMu.Lock()
	defer s.pullMu.Unlock()
	s.mu.Lock()
	subs := slices.Clone(s.subscriptions)
	topics := make([]string, len(subs))
	for i, sub := range subs {
		topics[i] = s.subTopic[sub]
	}
	s.mu.Unlock()
	var got []pubsubMessage
	for i, sub := range subs {
		for {
			resp, err := s.subs.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1000,
				ReturnImmediately: true}) //nolint:staticcheck // pstest honours it; the alternative waits 500 ms
			if err != nil {
				return nil, fmt.Errorf("pull %s: %w", sub, err)
			}
			if len(resp.ReceivedMessages) == 0 {
				break
			}
			ack := make([]string, 0, len(resp.ReceivedMessages))
			for _, m := range resp.ReceivedMessages {
				ack = append(ack, m.AckId)
				got = append(got, pubsubMessage{Topic: topics[i], MessageID: m.Message.MessageId,
					Attributes: m.Message.Attributes, Data: asJSON(m.Message.Data)})
			}
			if err := s.subs.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: ack}); err != nil {
				return nil, fmt.Errorf("ack %s: %w", sub, err)
			}
		}
	}
	// pstest hands messages out in no particular order; its ids ("m0", "m1", …) count
	// publishes, so they give the order the topic took them in.
	slices.SortStableFunc(got, func(a, b pubsubMessage) int { return messageNumber(a.MessageID) - messageNumber(b.MessageID) })
	s.pulled = append(s.pulled, got...)
	return append([]pubsubMessage{}, s.pulled...), nil
}

func messageNumber(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "m"))
	return n
}

// asJSON keeps a JSON payload as it is and quotes anything else as a string.
func asJSON(b []byte) json.RawMessage {
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	q, _ := json.Marshal(string(b))
	return q
}
