package kinesis

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/sinks/sinktest"
)

// putRecordAnswerer answers every PutRecord in process, as Kinesis does on the wire,
// so a benchmark measures the sink, not a server.
type putRecordAnswerer struct{ seq atomic.Int64 }

func (p *putRecordAnswerer) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	body := fmt.Sprintf(`{"SequenceNumber":"%056d","ShardId":"shardId-000000000000"}`, p.seq.Add(1))
	return &http.Response{StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: r,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.1"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body))}, nil
}

// BenchmarkSendDistinctStoreIDs writes b.N records to one destination, each with a
// store id never seen before, and reports the heap the sink still holds afterwards
// (retained-MB). Run with -benchtime=1000000x for the figure in docs/benchmarks.md.
func BenchmarkSendDistinctStoreIDs(b *testing.B) {
	sts := awstest.NewSTS(b)
	sts.RequireExternalID(role, extID)
	ours := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", "")}
	a := assume.New(assume.Options{STS: assume.NewSTSClient(ours, sts.URL), IdentityName: "mercamap"})
	sinkCfg := ours.Copy()
	sinkCfg.HTTPClient = &http.Client{Transport: &putRecordAnswerer{}}
	sink := New(Options{AWS: sinkCfg, Assumer: a, Endpoint: "http://kinesis.invalid"})
	d := destination.Destination{ID: "stream-orders", Account: "acct_123", Connector: destination.Kinesis,
		StreamARN: "arn:aws:kinesis:eu-west-1:111122223333:stream/orders", RoleARN: role, ExternalID: extID}
	m := sinktest.Message(d, 1)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for i := range b.N {
		m.StoreID = "store-" + strconv.Itoa(i)
		if err := sink.Send(b.Context(), d, m); err != nil {
			b.Fatalf("send %d: %v", i, err)
		}
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/1e6, "retained-MB")
	runtime.KeepAlive(sink)
}
