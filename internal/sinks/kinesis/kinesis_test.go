package kinesis

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/sinks/sinktest"
)

const (
	role   = "arn:aws:iam::111122223333:role/mercamap-delivery"
	kmsKey = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
	extID  = "ext-7f3a9c2e41d04b8d"
)

var streamSeq atomic.Int64

// env is one fresh stream on a shared kinesalite, reached through a fault proxy that
// checks every PutRecord was signed with the destination's session from the test STS.
type env struct {
	kinesalite string
	stream     string
	sts        *awstest.STS
	proxy      *awstest.FaultProxy
	sink       *Sink
	opts       Options // the sink's
	dest       destination.Destination
}

func newEnv(t *testing.T, kinesalite string) env {
	t.Helper()
	name := fmt.Sprintf("orders-%d", streamSeq.Add(1))
	awstest.CreateStream(t, kinesalite, name)
	sts := awstest.NewSTS(t)
	sts.RequireExternalID(role, extID)
	proxy := awstest.NewFaultProxy(t, kinesalite)
	proxy.RequireSessionFrom(sts)
	ours := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", "")}
	a := assume.New(assume.Options{STS: assume.NewSTSClient(ours, sts.URL), IdentityName: "mercamap",
		Backoff: config.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}})
	opts := Options{AWS: ours, Assumer: a, Endpoint: proxy.URL}
	return env{
		kinesalite: kinesalite, stream: name, sts: sts, proxy: proxy, sink: New(opts), opts: opts,
		// With a KMS key, so the session policy carries the kms statement too.
		dest: destination.Destination{ID: "stream-" + name, Account: "acct_123", Connector: destination.Kinesis,
			StreamARN: "arn:aws:kinesis:eu-west-1:111122223333:stream/" + name, RoleARN: role, KMSKeyARN: kmsKey, ExternalID: extID},
	}
}

func (e env) send(t *testing.T, m destination.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return e.sink.Send(ctx, e.dest, m)
}

// puts returns the PutRecord calls that reached kinesalite, in order.
func (e env) puts() []awstest.Call {
	var out []awstest.Call
	for _, c := range e.proxy.Calls() {
		if c.Operation == "PutRecord" && !c.Failed {
			out = append(out, c)
		}
	}
	return out
}

func TestConformance(t *testing.T) {
	kinesalite := awstest.StartKinesalite(t)
	sinktest.Run(t, func(t *testing.T) sinktest.Backend {
		e := newEnv(t, kinesalite)
		fault := func(f awstest.Failure, want failures.Class) sinktest.Fault {
			return sinktest.Fault{Inject: func(*testing.T) { e.proxy.FailNext(1, f) }, Want: want}
		}
		kms := func(code string) sinktest.Fault {
			return fault(awstest.Failure{Status: 400, Code: code, Message: "injected " + code}, failures.Rejected)
		}
		return sinktest.Backend{
			Sink: e.sink,
			Dest: e.dest,
			Read: func(t *testing.T, n int) []sinktest.Received {
				var out []sinktest.Received
				for _, r := range awstest.ReadStream(t, kinesalite, e.stream, n) {
					var body map[string]any
					if err := json.Unmarshal(r.Data, &body); err != nil {
						t.Fatalf("record data is not JSON: %v", err)
					}
					out = append(out, sinktest.Received{Body: body, PartitionKey: aws.ToString(r.PartitionKey)})
				}
				return out
			},
			Faults: map[string]sinktest.Fault{
				"ProvisionedThroughputExceededException": fault(awstest.ProvisionedThroughput, failures.NotTaken),
				"KMSThrottlingException":                 fault(awstest.KMSThrottling, failures.NotTaken),
				"HTTP 500":                               fault(awstest.InternalFailure, failures.NotTaken),
				"AccessDeniedException":                  fault(awstest.AccessDeniedException, failures.Rejected),
				"ResourceNotFoundException":              fault(awstest.ResourceNotFound, failures.Rejected),
				"KMSAccessDeniedException":               fault(awstest.KMSAccessDenied, failures.Rejected),
				"KMSDisabledException":                   kms("KMSDisabledException"),
				"KMSNotFoundException":                   kms("KMSNotFoundException"),
				"KMSInvalidStateException":               kms("KMSInvalidStateException"),
				"KMSOptInRequired":                       kms("KMSOptInRequired"),
			},
		}
	})
}

// TestRecordsAreFlatKeyedAndChainedPerKey sends events for three stores and none, and
// reads the stream back: flat bodies, the right keys, each record ordered after the
// previous one of its key, every write signed with the destination's session.
func TestRecordsAreFlatKeyedAndChainedPerKey(t *testing.T) {
	e := newEnv(t, awstest.StartKinesalite(t))
	const n = 12
	var sent []destination.Message
	for i := range n {
		m := sinktest.Message(e.dest, i)
		if err := e.send(t, m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		sent = append(sent, m)
	}
	records, puts := awstest.ReadStream(t, e.kinesalite, e.stream, n), e.puts()
	if len(records) != n || len(puts) != n {
		t.Fatalf("%d records and %d PutRecord calls, want %d each", len(records), len(puts), n)
	}
	last := map[string]string{} // partition key → sequence number of its previous record
	for i, r := range records {
		m := sent[i]
		want, _ := flatten(m.Body())
		key := m.StoreID
		if key == "" {
			key = "acct_123"
		}
		if string(r.Data) != string(want) || aws.ToString(r.PartitionKey) != key {
			t.Errorf("record %d = %s keyed %q, want %s keyed %q", i, r.Data, aws.ToString(r.PartitionKey), want, key)
		}
		in := puts[i].Input
		if in["StreamARN"] != e.dest.StreamARN || in["StreamName"] != e.stream {
			t.Errorf("PutRecord %d named stream %v / %v, want both the ARN and the name", i, in["StreamARN"], in["StreamName"])
		}
		if got, _ := in["SequenceNumberForOrdering"].(string); got != last[key] {
			t.Errorf("PutRecord %d (key %s) ordered after %q, want the key's previous record %q", i, key, got, last[key])
		}
		last[key] = aws.ToString(r.SequenceNumber)
		if s, ok := e.sts.Session(puts[i].AccessKeyID); !ok || s.ExternalID != extID {
			t.Errorf("PutRecord %d signed with %s, not the destination's session", i, puts[i].AccessKeyID)
		}
	}
	if len(last) != 4 {
		t.Errorf("records used %d partition keys, want 4 (three stores and the account)", len(last))
	}
}

// TestRecordKeepsEveryValueAndEveryDigit reads back from the stream the record of a
// body whose keys collide once snake_cased, with objects inside arrays and numbers no
// float64 holds: every value is there, under the contract's names, digit for digit,
// and the numeric store id is the partition key as written.
func TestRecordKeepsEveryValueAndEveryDigit(t *testing.T) {
	e := newEnv(t, awstest.StartKinesalite(t))
	m := sinktest.Message(e.dest, 1)
	m.Data = json.RawMessage(`{"metadata":{"store_id":1234567890123456789,"orderId":"A","order_id":"B"},` +
		`"rows":[{"skuCode":"x","unitPrice":0.10000000000000000555},{"skuCode":"y"}],"total":12345678901234567890}`)
	m.StoreID = "1234567890123456789"
	if err := e.send(t, m); err != nil {
		t.Fatal(err)
	}
	r := awstest.ReadStream(t, e.kinesalite, e.stream, 1)[0]
	want := `{"id":"` + m.ID + `","type":"job.completed","data_metadata_store_id":1234567890123456789,` +
		`"data_metadata_order_id":"A","data_metadata_order_id__2":"B",` +
		`"data_rows_0_sku_code":"x","data_rows_0_unit_price":0.10000000000000000555,"data_rows_1_sku_code":"y",` +
		`"data_total":12345678901234567890,"event_id":"` + m.EventID + `","created_at":"` + m.CreatedAt + `"}`
	if string(r.Data) != want {
		t.Errorf("record\n got %s\nwant %s", r.Data, want)
	}
	if key := aws.ToString(r.PartitionKey); key != "1234567890123456789" {
		t.Errorf("partition key %q, want the store id 1234567890123456789", key)
	}
}

// TestSequenceMemoryIsBoundedAndForgetsTheLeastRecentChain: the sink remembers the last
// sequence number of only so many partition keys (one per store id, and store ids
// never stop coming); a forgotten key's next record is written unchained, and lands.
func TestSequenceMemoryIsBoundedAndForgetsTheLeastRecentChain(t *testing.T) {
	e := newEnv(t, awstest.StartKinesalite(t))
	e.opts.SequenceMemory = 2
	e.sink = New(e.opts)
	stores := []string{"store-a", "store-b", "store-c", "store-a", "store-c"}
	for i, store := range stores {
		m := sinktest.Message(e.dest, i)
		m.StoreID = store
		if err := e.send(t, m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	records, puts := awstest.ReadStream(t, e.kinesalite, e.stream, len(stores)), e.puts()
	if len(records) != len(stores) || len(puts) != len(stores) {
		t.Fatalf("%d records and %d PutRecord calls, want %d each", len(records), len(puts), len(stores))
	}
	// store-a was forgotten when store-c came (two remembered: b, c); store-c was not.
	for i, want := range []string{"", "", "", "", aws.ToString(records[2].SequenceNumber)} {
		if got, _ := puts[i].Input["SequenceNumberForOrdering"].(string); got != want {
			t.Errorf("PutRecord %d (%s) ordered after %q, want %q", i, stores[i], got, want)
		}
		if got := aws.ToString(records[i].PartitionKey); got != stores[i] {
			t.Errorf("record %d keyed %q, want %q", i, got, stores[i])
		}
	}
}

func TestRoleThatLetsTheProbeInIsRejectedAndNothingIsWritten(t *testing.T) {
	e := newEnv(t, awstest.StartKinesalite(t))
	e.sts.AllowAny(role)
	err := e.send(t, sinktest.Message(e.dest, 1))
	if o := failures.Classify(err); o.Class != failures.Rejected || !strings.Contains(o.Message, "does not require this destination's ExternalId") {
		t.Fatalf("Send = %+v, want rejected: the role does not require its ExternalId", o)
	}
	if calls := e.proxy.Calls(); len(calls) != 0 {
		t.Fatalf("%d requests reached Kinesis, want none", len(calls))
	}
}

func TestTooLargeRecordIsRejectedWithoutCallingAWS(t *testing.T) {
	e := newEnv(t, awstest.StartKinesalite(t))
	sized := func(size int) destination.Message {
		m := sinktest.Message(e.dest, 2) // keyed by store-2
		m.Data = json.RawMessage(`{"blob":""}`)
		empty, _ := flatten(m.Body())
		m.Data = json.RawMessage(`{"blob":"` + strings.Repeat("x", size-len(empty)-len(m.StoreID)) + `"}`)
		return m
	}
	err := e.send(t, sized(MaxRecordSize+1))
	if o := failures.Classify(err); o.Class != failures.Rejected || !strings.Contains(o.Message, "1 MiB") {
		t.Fatalf("Send = %+v, want rejected saying the stream's 1 MiB limit", o)
	}
	if len(e.sts.Requests()) != 0 || len(e.proxy.Calls()) != 0 {
		t.Fatalf("an oversized record called AWS: %d STS calls, %d Kinesis calls", len(e.sts.Requests()), len(e.proxy.Calls()))
	}
	if err := e.send(t, sized(MaxRecordSize)); err != nil {
		t.Fatalf("a record of exactly 1 MiB: %v", err)
	}
	if r := awstest.ReadStream(t, e.kinesalite, e.stream, 1); len(r[0].Data)+len(aws.ToString(r[0].PartitionKey)) != MaxRecordSize {
		t.Fatalf("the record on the stream is %d bytes, want %d", len(r[0].Data)+len(aws.ToString(r[0].PartitionKey)), MaxRecordSize)
	}
}

func TestStoreIDLongerThanAPartitionKeyIsRejected(t *testing.T) {
	e := newEnv(t, awstest.StartKinesalite(t))
	m := sinktest.Message(e.dest, 1)
	m.StoreID = strings.Repeat("s", 257)
	if o := failures.Classify(e.send(t, m)); o.Class != failures.Rejected || !strings.Contains(o.Message, "partition key") {
		t.Fatalf("Send = %+v, want rejected naming the partition key limit", o)
	}
	m.StoreID = strings.Repeat("é", 256) // 256 characters, 512 bytes: allowed
	if err := e.send(t, m); err != nil {
		t.Fatalf("a 256-character store id: %v", err)
	}
}
