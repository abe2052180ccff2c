package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"

	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/waittest"
)

// eventually is the shared wait for a call that must come to succeed (waittest).
var eventually = waittest.NoError

func TestThrottleProxyAnswersEverySecondPutEventsWithThrottlingWhileInItsWindow(t *testing.T) {
	var upstream atomic.Int64
	bus := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstream.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = io.WriteString(w, `{"Entries":[{"EventId":"e-1"}],"FailedEntryCount":0}`)
	}))
	defer bus.Close()
	p, err := startThrottleProxy(bus.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()

	// put sends one raw PutEvents and reports whether the proxy answered it as throttled.
	put := func(i int) (throttled bool) {
		t.Helper()
		req, _ := http.NewRequest("POST", p.URL+"/", strings.NewReader(`{"Entries":[{"Source":"s","DetailType":"d","Detail":"{}"}]}`))
		req.Header.Set("X-Amz-Target", "AWSEvents.PutEvents")
		req.Header.Set("Content-Type", "application/x-amz-json-1.1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 200 {
			return false
		}
		if resp.StatusCode != 400 || resp.Header.Get("X-Amzn-ErrorType") != "ThrottlingException" ||
			resp.Header.Get("Content-Type") != "application/x-amz-json-1.1" ||
			string(body) != `{"__type":"ThrottlingException","message":"Rate exceeded"}` {
			t.Fatalf("request %d: not the throttling wire format: %s %v %s", i, resp.Status, resp.Header, body)
		}
		return true
	}

	for i := range 4 {
		if put(i) {
			t.Fatalf("request %d before the window was throttled", i)
		}
	}
	if got := upstream.Load(); got != 4 {
		t.Fatalf("upstream got %d requests before the window, want 4", got)
	}

	p.begin()
	for i := 1; i <= 6; i++ {
		if got, want := put(i), i%2 == 0; got != want {
			t.Fatalf("request %d in the window: throttled %v, want %v", i, got, want)
		}
	}
	if got := upstream.Load(); got != 4+3 {
		t.Fatalf("upstream got %d requests, want 7: a throttled request must not be forwarded", got)
	}

	// The real SDK client (one attempt, as the relay's sink) sees the typed code, and the
	// relay's classifier calls it not taken: retried, never counted.
	c := eventbridge.New(eventbridge.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(p.URL), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "not-a-secret", "token"),
	})
	in := &eventbridge.PutEventsInput{Entries: []types.PutEventsRequestEntry{{
		EventBusName: aws.String("arn:aws:events:us-east-1:111122223333:event-bus/drill"),
		Source:       aws.String("com.mercamap"), DetailType: aws.String("job.completed"), Detail: aws.String(`{}`),
	}}}
	if _, err := c.PutEvents(t.Context(), in); err != nil { // 7th in the window: forwarded
		t.Fatalf("7th PutEvents in the window: %v", err)
	}
	_, err = c.PutEvents(t.Context(), in) // 8th: throttled
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "ThrottlingException" || apiErr.ErrorMessage() != "Rate exceeded" {
		t.Fatalf("8th PutEvents in the window: want a ThrottlingException API error, got %v", err)
	}
	if o := failures.Classify(err); o.Class != failures.NotTaken {
		t.Fatalf("the relay classifies the throttle as %s (%s), want not taken", o.Class, o.Message)
	}
	if inWin, throttled := p.counts(); inWin != 8 || throttled != 4 {
		t.Fatalf("counts: %d in the window, %d throttled; want 8 and 4", inWin, throttled)
	}

	p.end()
	before := upstream.Load()
	for i := range 5 {
		if put(i) {
			t.Fatalf("request %d after the window was throttled", i)
		}
	}
	if got := upstream.Load() - before; got != 5 {
		t.Fatalf("upstream got %d of 5 requests after the window", got)
	}
	if _, throttled := p.counts(); throttled != 4 {
		t.Fatalf("throttled count moved after the window: %d", throttled)
	}
}

func TestStallProxyHoldsRequestsUnansweredDuringAStallAndServesAfterIt(t *testing.T) {
	var upstream atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstream.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	p, err := startStallProxy(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	url := "http://" + p.Addr + "/"

	get := func(c *http.Client, limit time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "ok" {
			return fmt.Errorf("body %q", b)
		}
		return nil
	}
	pooled := &http.Client{Transport: &http.Transport{}} // keeps its connection open across the stall
	if err := get(pooled, 5*time.Second); err != nil {
		t.Fatalf("before the stall: %v", err)
	}

	p.begin()
	// A raw connection accepted during the stall: never served, reset when it ends.
	raw, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := io.WriteString(raw, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := bufio.NewReader(raw).ReadByte(); !errors.Is(err, context.DeadlineExceeded) && !isNetTimeout(err) {
		t.Fatalf("a new connection during the stall answered: %v", err)
	}
	// The connection open before the stall, and a fresh one, both go unanswered.
	if err := get(pooled, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("on the connection open before the stall: want a timeout, got %v", err)
	}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if err := get(fresh, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("on a new connection during the stall: want a timeout, got %v", err)
	}
	if got := upstream.Load(); got != 1 {
		t.Fatalf("upstream got %d requests, want only the one before the stall", got)
	}
	open, accepted := p.counts()
	if open != 1 || accepted != 2 {
		t.Fatalf("held %d open and %d accepted connections, want 1 and 2", open, accepted)
	}

	p.end()
	// The held connection is closed (reset), and new connections are served.
	eventually(t, 5*time.Second, "the held connection is closed", func() error {
		_ = raw.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := raw.Read(make([]byte, 1))
		if err == nil || isNetTimeout(err) {
			return fmt.Errorf("still open (%v)", err)
		}
		return nil
	})
	if err := get(fresh, 5*time.Second); err != nil {
		t.Fatalf("a new connection after the stall: %v", err)
	}
	eventually(t, 5*time.Second, "the pooled client is served again", func() error { return get(pooled, time.Second) })
	if open, accepted := p.counts(); open != 1 || accepted != 2 {
		t.Fatalf("counts moved after the stall: %d open, %d accepted", open, accepted)
	}
}

func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
