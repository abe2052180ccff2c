package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/testpeer"
)

const role = "arn:aws:iam::111122223333:role/mercamap-delivery"

// syncBuffer is the sandbox's stdout, read by the test while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// box is a sandbox running in-process on free loopback ports.
type box struct {
	sts, events, kinesis, admin, pubsub, iam string
	out                                      *syncBuffer
}

func start(t *testing.T, kinesalite string, flags ...string) *box {
	t.Helper()
	port := func() string { return "127.0.0.1:" + strconv.Itoa(testpeer.FreePort(t)) }
	b := &box{sts: port(), events: port(), kinesis: port(), admin: port(), iam: port(), out: &syncBuffer{}}
	psPort := testpeer.FreePort(t)
	b.pubsub = "127.0.0.1:" + strconv.Itoa(psPort)
	args := []string{"--sts", b.sts, "--events", b.events, "--admin", b.admin, "--kinesis", b.kinesis, "--iam", b.iam,
		"--pubsub-port", strconv.Itoa(psPort), "--kinesalite", kinesalite}
	args = append(args, flags...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, func(string) string { return "" }, b.out, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("sandbox: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("sandbox did not stop within 10 s of its context ending")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.out.String(), "sandbox: ready") {
		select {
		case err := <-done:
			t.Fatalf("sandbox exited before it was ready: %v\n%s", err, b.out)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox not ready within 10 s:\n%s", b.out)
		}
	}
	return b
}

// post calls the admin API and decodes its answer into out (when not nil).
func (b *box) post(t *testing.T, path string, in, out any) {
	t.Helper()
	body, _ := json.Marshal(in)
	resp, err := http.Post("http://"+b.admin+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s %s", path, resp.Status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("POST %s answered %s: %v", path, raw, err)
		}
	}
}

func (b *box) arrived(t *testing.T) arrivedBody {
	t.Helper()
	resp, err := http.Get("http://" + b.admin + "/arrived")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /arrived: %s %s", resp.Status, raw)
	}
	var a arrivedBody
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("GET /arrived answered %s: %v", raw, err)
	}
	return a
}

// assumeRole calls the sandbox's STS with the real SDK, signed with our (dummy) identity.
func (b *box) assumeRole(t *testing.T, externalID string) (*sts.AssumeRoleOutput, error) {
	t.Helper()
	c := sts.New(sts.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + b.sts),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDRELAY", "relay-secret", ""), Retryer: aws.NopRetryer{}})
	return c.AssumeRole(t.Context(), &sts.AssumeRoleInput{RoleArn: aws.String(role), RoleSessionName: aws.String("mercamap-acct_demo"),
		ExternalId: aws.String(externalID), DurationSeconds: aws.Int32(900)})
}

// compact is a JSON value without the indentation /arrived adds.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func accessDenied(t *testing.T, err error) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" {
		t.Fatalf("AssumeRole: %v, want AccessDenied", err)
	}
}

func TestTrustAndEventBridge(t *testing.T) {
	b := start(t, "")

	// Before the customer pastes the trust policy, the role lets nobody in.
	_, err := b.assumeRole(t, "ext-right")
	accessDenied(t, err)

	b.post(t, "/trust", map[string]string{"role_arn": role, "external_id": "ext-right"}, nil)
	_, err = b.assumeRole(t, "ext-wrong")
	accessDenied(t, err)
	out, err := b.assumeRole(t, "ext-right")
	if err != nil {
		t.Fatalf("AssumeRole with the trusted ExternalId: %v", err)
	}

	bus := "arn:aws:events:us-east-1:111122223333:event-bus/orders"
	put := func(creds aws.CredentialsProvider) error {
		c := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + b.events),
			Credentials: creds, Retryer: aws.NopRetryer{}})
		_, err := c.PutEvents(t.Context(), &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
			EventBusName: aws.String(bus), Source: aws.String("com.mercamap"), DetailType: aws.String("job.completed"),
			Detail: aws.String(`{"event_id":"e1"}`)}}})
		return err
	}
	// Our own keys are not a session on the customer's role: the bus refuses them.
	if err := put(credentials.NewStaticCredentialsProvider("AKIDRELAY", "relay-secret", "")); err == nil {
		t.Fatal("PutEvents signed with our own keys was taken; want it refused")
	}
	c := out.Credentials
	if err := put(credentials.NewStaticCredentialsProvider(*c.AccessKeyId, *c.SecretAccessKey, *c.SessionToken)); err != nil {
		t.Fatalf("PutEvents with the session: %v", err)
	}
	got := b.arrived(t).EventBridge
	if len(got) != 1 || got[0].Bus != bus || got[0].DetailType != "job.completed" || compact(got[0].Detail) != `{"event_id":"e1"}` {
		t.Fatalf("arrived on EventBridge: %+v, want the one entry", got)
	}

	resp, err := http.Post("http://"+b.admin+"/trust", "application/json", strings.NewReader(`{"role_arn":"nope"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST /trust with a bad role: %s, want 400", resp.Status)
	}
}

func TestPubSubTopicWithLabels(t *testing.T) {
	b := start(t, "")
	labels := map[string]string{"mercamap-account": "acct_demo"}
	b.post(t, "/topics", map[string]any{"project": "relay-demo", "topic": "relay-events", "labels": labels}, nil)

	c, err := vkit.NewTopicAdminClient(t.Context(), option.WithEndpoint(b.pubsub), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := "projects/relay-demo/topics/relay-events"
	topic, err := c.GetTopic(t.Context(), &pubsubpb.GetTopicRequest{Topic: name})
	if err != nil || topic.Labels["mercamap-account"] != "acct_demo" {
		t.Fatalf("GetTopic: %v %v, want the label mercamap-account=acct_demo", topic, err)
	}
	for i := range 3 {
		_, err := c.Publish(t.Context(), &pubsubpb.PublishRequest{Topic: name, Messages: []*pubsubpb.PubsubMessage{{
			Data: fmt.Appendf(nil, `{"n":%d}`, i), Attributes: map[string]string{"event_id": "e" + strconv.Itoa(i)}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	got := b.arrived(t).PubSub
	if len(got) != 3 {
		t.Fatalf("arrived on Pub/Sub: %+v, want 3 messages", got)
	}
	for i, m := range got {
		if m.Topic != name || m.Attributes["event_id"] != "e"+strconv.Itoa(i) || compact(m.Data) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Errorf("message %d: %+v", i, m)
		}
	}
	// What was pulled once stays in the answer.
	if again := b.arrived(t).PubSub; len(again) != 3 {
		t.Errorf("a second /arrived shows %d messages, want the same 3", len(again))
	}
	resp, err := http.Get("http://" + b.admin + "/arrived?view=text")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(text), "Pub/Sub: 3 messages") || !strings.Contains(string(text), "EventBridge: 0 entries") {
		t.Errorf("/arrived?view=text:\n%s", text)
	}
}

func TestKinesisStream(t *testing.T) {
	b := start(t, awstest.StartKinesalite(t))
	var made struct{ Stream, Status string }
	b.post(t, "/streams", map[string]string{"name": "orders"}, &made)
	if made.Stream != "orders" || made.Status != "ACTIVE" {
		t.Fatalf("POST /streams answered %+v", made)
	}
	b.post(t, "/streams", map[string]string{"name": "orders"}, nil) // a second time is fine

	put := func(creds aws.CredentialsProvider, n int) error {
		c := kinesis.New(kinesis.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + b.kinesis),
			Credentials: creds, Retryer: aws.NopRetryer{}})
		_, err := c.PutRecord(t.Context(), &kinesis.PutRecordInput{StreamName: aws.String("orders"),
			StreamARN:    aws.String("arn:aws:kinesis:us-east-1:111122223333:stream/orders"),
			PartitionKey: aws.String("store-1"), Data: fmt.Appendf(nil, `{"n":%d}`, n)})
		return err
	}
	if err := put(credentials.NewStaticCredentialsProvider("AKIDRELAY", "relay-secret", ""), 0); err == nil {
		t.Fatal("PutRecord signed with our own keys was taken; want it refused")
	}
	b.post(t, "/trust", map[string]string{"role_arn": role, "external_id": "ext-right"}, nil)
	out, err := b.assumeRole(t, "ext-right")
	if err != nil {
		t.Fatal(err)
	}
	sess := credentials.NewStaticCredentialsProvider(*out.Credentials.AccessKeyId, *out.Credentials.SecretAccessKey, *out.Credentials.SessionToken)
	for i := range 3 {
		if err := put(sess, i); err != nil {
			t.Fatalf("PutRecord %d with the session: %v", i, err)
		}
	}
	got := b.arrived(t).Kinesis
	if len(got) != 3 {
		t.Fatalf("arrived on Kinesis: %+v, want 3 records", got)
	}
	for i, r := range got {
		if r.Stream != "orders" || r.PartitionKey != "store-1" || compact(r.Data) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Errorf("record %d: %+v", i, r)
		}
	}
}

func TestRefusesAddressesOffLoopback(t *testing.T) {
	for _, args := range [][]string{
		{"--admin", "0.0.0.0:24583"},
		{"--sts", "example.com:443"},
		{"--kinesalite", "http://10.0.0.1:4567"},
	} {
		if err := run(t.Context(), args, func(string) string { return "" }, io.Discard, io.Discard); err == nil {
			t.Errorf("run %v: started; want it refused", args)
		}
	}
}

func TestKinesaliteOutlivesClientsThatGoAwayMidCall(t *testing.T) {
	b := start(t, awstest.StartKinesalite(t))
	b.post(t, "/streams", map[string]string{"name": "orders"}, nil)

	// Clients cut off mid-request, as a relay SIGKILLed or a network path reset mid-call:
	// half a body, or a whole one and gone before the answer.
	body := `{"StreamName":"orders"}`
	for i := range 20 {
		conn, err := net.Dial("tcp", b.kinesis)
		if err != nil {
			t.Fatal(err)
		}
		sent := body
		if i%2 == 0 {
			sent = body[:len(body)/2]
		}
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: %s\r\nX-Amz-Target: Kinesis_20131202.DescribeStream\r\n"+
			"Content-Type: application/x-amz-json-1.1\r\nAuthorization: AWS4-HMAC-SHA256 Credential=AKID/x\r\n"+
			"Content-Length: %d\r\n\r\n%s", b.kinesis, len(body), sent)
		conn.Close()
	}

	// kinesalite still answers through the front.
	c := kinesis.New(kinesis.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + b.kinesis),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", ""), Retryer: aws.NopRetryer{}})
	if _, err := c.DescribeStream(t.Context(), &kinesis.DescribeStreamInput{StreamName: aws.String("orders")}); err != nil {
		t.Fatalf("after clients went away mid-call, DescribeStream: %v", err)
	}
}
