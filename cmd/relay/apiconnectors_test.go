package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
)

// connectorJourney is what differs between the connectors in the customer's journey:
// the create body, the customer's setup once the card says what it needs, and what the
// customer's bus holds.
type connectorJourney struct {
	connector  string
	body       string
	setUp      func(card apiCard) // the customer trusts the ExternalId, or labels the topic
	arrivals   func() []string    // event ids at the customer's bus, in first-arrival order
	externalID bool               // the card issues an ExternalId (AWS)
}

// TestKinesisAndPubSubDestinationsMadeThroughTheAPIAreDeliveredAndDeletedForGood: the
// EventBridge journey of TestADestinationMadeThroughTheAPIIsDeliveredByEveryReplicaAndDeletedForGood
// for the other two connectors, on two replicas, each checked at its own test server:
// kinesalite behind a proxy that takes only a PutRecord signed with the session the
// sandbox STS handed out for the card's ExternalId, and pstest, whose topic carries the
// account's label only once the customer sets it. Created on replica 0, pending until the
// customer's setup; "Send a test" on replica 1 turns it active; 100 events in the
// publisher's confirmed order; a PATCH of its filter; a delete on replica 1 after which
// nothing reaches the bus and both replicas answer 404; made again (a new ExternalId for
// Kinesis).
func TestKinesisAndPubSubDestinationsMadeThroughTheAPIAreDeliveredAndDeletedForGood(t *testing.T) {
	kinesalite := awstest.StartKinesalite(t)
	awstest.CreateStream(t, kinesalite, "api-stream")
	ps := pstest.NewServer()
	t.Cleanup(func() { _ = ps.Close() })
	const topic = "projects/acme-prod/topics/api-topic"
	admin, err := vkit.NewTopicAdminClient(context.Background(), option.WithEndpoint(ps.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	if _, err := admin.CreateTopic(t.Context(), &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}

	proxy := awstest.NewFaultProxy(t, kinesalite)
	rs := startReplicasWith(t, 2, replicaOptions{kinesis: proxy.URL, pubsub: ps.Addr})
	proxy.RequireSessionFrom(rs.sts)
	const roleARN = "arn:aws:iam::111122223333:role/api-stream-role"

	for _, j := range []connectorJourney{
		{
			connector:  "kinesis",
			body:       `{"id":"api-stream","stream_arn":"arn:aws:kinesis:us-east-1:111122223333:stream/api-stream","role_arn":"` + roleARN + `"}`,
			setUp:      func(c apiCard) { rs.sts.RequireExternalID(roleARN, *c.ExternalID) },
			arrivals:   func() []string { return streamEventIDs(t, kinesalite, "api-stream") },
			externalID: true,
		},
		{
			connector: "pubsub",
			body:      `{"id":"api-topic","project_id":"acme-prod","topic_id":"api-topic"}`,
			setUp: func(apiCard) {
				if _, err := admin.UpdateTopic(t.Context(), &pubsubpb.UpdateTopicRequest{
					Topic:      &pubsubpb.Topic{Name: topic, Labels: map[string]string{"mercamap-account": "acct_1"}},
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
				}); err != nil {
					t.Fatal(err)
				}
			},
			arrivals: func() []string { return topicEventIDs(ps, topic) },
		},
	} {
		t.Run(j.connector, func(t *testing.T) { rs.connectorJourney(t, j) })
	}
}

// connectorJourney runs j's journey on rs (see the test above).
func (rs *replicaSet) connectorJourney(t *testing.T, j connectorJourney) {
	base := "/v1/connectors/" + j.connector + "/destinations"
	var id struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(j.body), &id); err != nil {
		t.Fatal(err)
	}
	url := func(i int) string { return rs.apis[i] + base + "/" + id.ID }

	created := httpSend(t, http.MethodPost, rs.apis[0]+base, replicasAcctToken, j.body)
	if created.status != http.StatusCreated {
		t.Fatalf("create: %d %s", created.status, created.body)
	}
	card := decodeAs[apiCard](t, created)
	if card.Status != "pending" || card.ManagedBy != "api" || (card.ExternalID != nil) != j.externalID {
		t.Fatalf("the new card: %s; want pending, managed by the api, with an ExternalId for AWS only", created.body)
	}
	waitUntil(t, time.Second, "replica 1 to serve the new card", func() bool {
		return httpDo(t, http.MethodGet, url(1), replicasAcctToken).status == http.StatusOK
	})
	if n := len(j.arrivals()); n != 0 {
		t.Fatalf("%d events reached the bus before the customer set it up", n)
	}

	j.setUp(card)
	rs.testUntilActive(url(1), replicasAcctToken)
	start := len(rs.confirmedIDs())
	from := 2000 + 1000*len(j.connector) // ids of this connector's own: a re-emit would be deduplicated
	rs.publish(from, from+100, 16)
	confirmed := rs.confirmedIDs()[start:]
	if !waitFor(60*time.Second, func() bool { return hasAll(j.arrivals(), confirmed) }) {
		t.Fatalf("%d of the 100 events at the bus after a minute; the card: %s\n%s", len(j.arrivals()),
			httpDo(t, http.MethodGet, url(0), replicasAcctToken).body, rs.logTails())
	}
	if n := outOfOrder(confirmed, j.arrivals()); n > 0 {
		t.Fatalf("%d events reached the bus out of the publisher's confirmed order", n)
	}

	patched := httpSend(t, http.MethodPatch, url(1), replicasAcctToken, `{"events":["job.failed"]}`)
	if patched.status != http.StatusOK {
		t.Fatalf("patch: %d %s", patched.status, patched.body)
	}
	if c := decodeAs[apiCard](t, patched); j.externalID && (c.ExternalID == nil || *c.ExternalID != *card.ExternalID) {
		t.Fatalf("the patched card's ExternalId is %v, want it unchanged (%s)", c.ExternalID, *card.ExternalID)
	}
	before := len(j.arrivals())
	prefix := fmt.Sprintf("0190f2a4-8888-7000-%04x-", len(j.connector))
	for i := range 5 {
		job := jobevent.Job{ID: fmt.Sprintf("%s%012d", prefix, i), Status: "completed"}
		if i == 4 {
			job.Status = "failed"
		}
		if err := rs.ch.Publish(rs.exchange, job.RoutingKey(), false, false, jobevent.Build(job, rs.exchange, rs.key, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	failedID := jobevent.Job{ID: prefix + "000000000004", Status: "failed"}.EventID()
	waitUntil(t, 30*time.Second, "the failed job at the bus", func() bool { return slices.Contains(j.arrivals(), failedID) })
	if after := j.arrivals()[before:]; !slices.Equal(after, []string{failedID}) {
		t.Fatalf("after the filter changed the bus got %v, want only %s\n%s", after, failedID, rs.logTails())
	}

	del := httpSend(t, http.MethodDelete, url(1), replicasAcctToken, "")
	if del.status != http.StatusOK || !strings.Contains(del.body, `"deleted":"`+id.ID+`"`) {
		t.Fatalf("delete: %d %s", del.status, del.body)
	}
	atDelete := len(j.arrivals())
	for i := range rs.apis {
		waitUntil(t, time.Second, fmt.Sprintf("replica %d to answer 404", i), func() bool {
			return httpDo(t, http.MethodGet, url(i), replicasAcctToken).status == http.StatusNotFound
		})
	}
	// Failed jobs the deleted destination would have taken; the config's orders-bus takes
	// them too, and its last one arriving there means the relay has handled them all.
	var lastFailed string
	for i := range 3 {
		job := jobevent.Job{ID: fmt.Sprintf("%s%012d", prefix, 100+i), Status: "failed"}
		if err := rs.ch.Publish(rs.exchange, job.RoutingKey(), false, false, jobevent.Build(job, rs.exchange, rs.key, time.Now())); err != nil {
			t.Fatal(err)
		}
		lastFailed = job.EventID()
	}
	waitUntil(t, 30*time.Second, "the config's destination to get what followed", func() bool {
		return slices.Contains(firstArrivals(t, rs.bus.Entries()), lastFailed)
	})
	if n := len(j.arrivals()); n != atDelete {
		t.Fatalf("%d events reached the deleted destination's bus after its delete answered", n-atDelete)
	}

	again := httpSend(t, http.MethodPost, rs.apis[0]+base, replicasAcctToken, j.body)
	if again.status != http.StatusCreated {
		t.Fatalf("create again: %d %s", again.status, again.body)
	}
	if c := decodeAs[apiCard](t, again); j.externalID && (c.ExternalID == nil || *c.ExternalID == *card.ExternalID) {
		t.Fatalf("made again: %s; want a new ExternalId (the deleted one's was %s)", again.body, *card.ExternalID)
	}
}

// streamEventIDs are the event ids of the records on kinesalite's one-shard stream name,
// in order, as far as the shard goes now.
func streamEventIDs(t *testing.T, endpoint, name string) []string {
	t.Helper()
	var ids []string
	seen := map[string]bool{}
	for _, r := range awstest.Records(t, endpoint, name) {
		var body struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(r.Data, &body); err != nil {
			t.Fatalf("record %q: %v", r.Data, err)
		}
		if !seen[body.EventID] {
			seen[body.EventID] = true
			ids = append(ids, body.EventID)
		}
	}
	return ids
}

// topicEventIDs are the event ids pstest took on topic, in the order it took them.
func topicEventIDs(ps *pstest.Server, topic string) []string {
	var ids []string
	seen := map[string]bool{}
	for _, m := range ps.Messages() {
		if id := m.Attributes["event_id"]; m.Topic == topic && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids
}
