package api_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/store"
)

// BenchmarkAccountBDeliveryWhileAccountAHoldsSubscriptions times one of account B's
// deliveries end to end: its event appended to B's log → delivered by the dispatcher →
// its delivery.succeeded read by B's subscriber. Meanwhile account A holds none, the cap
// (subscriptions_per_account, default 200) or 2,000 subscriptions (the cap raised) over
// its four channels, each read by a client, while A's own events flow at 100/s.
//
//	CI=1 go test -run=NONE -bench=AccountB -benchtime=100x ./internal/api/
func BenchmarkAccountBDeliveryWhileAccountAHoldsSubscriptions(b *testing.B) {
	for _, held := range []int{0, config.DefaultAPI().SubscriptionsPerAccount, 2000} {
		b.Run(fmt.Sprintf("A_holds_%d", held), func(b *testing.B) { benchAccountB(b, held) })
	}
}

func benchAccountB(b *testing.B, held int) {
	perToken := config.DefaultAPI().SubscriptionsPerToken
	var aTokens []string
	r := apitest.New(b, apitest.Options{Config: func(c *config.Config) {
		c.API.SubscriptionsPerAccount = max(held, 1)
		c.API.HTTP.MaxConnections = held + 100
		for i := 0; i*perToken < held; i++ {
			tok := fmt.Sprintf("acct1-bench-token-%04d", i)
			aTokens = append(aTokens, tok)
			c.API.Tokens = append(c.API.Tokens, config.Token{Scope: "account:" + apitest.Acct1, Token: tok})
		}
	}})
	r.Start()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: held + 10}}

	// Account A: `held` subscriptions, each drained by its own reader.
	channels := []string{"destination:orders-bus", "destination:orders-stream", "destination:orders-topic", "account:acct_1"}
	var readers sync.WaitGroup
	for i := range held {
		resp := open(b, ctx, client, r.URL+"/v1/streams/"+channels[i%len(channels)]+"/subscribe", aTokens[i/perToken])
		readers.Add(1)
		go func() {
			defer readers.Done()
			rd := bufio.NewReader(resp.Body)
			for {
				if _, err := rd.ReadString('\n'); err != nil {
					return
				}
			}
		}()
	}
	// A's own events at 100/s, so its subscribers have news to be sent.
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, _ = r.Store.AppendBatch(ctx, []store.Append{{Accounts: []string{apitest.Acct1}, Entry: store.Entry{
				EventID: fmt.Sprintf("fetcher.job.completed.a-%06d", n), Type: "job.completed",
				Time: time.Now().UTC().Format(time.RFC3339Nano), SchemaVersion: "1.0.0", Data: []byte(`{"jobId":"a"}`),
			}}}, time.Hour, time.Hour)
		}
	}()

	// Account B: one subscriber on its destination's channel.
	resp := open(b, ctx, client, r.URL+"/v1/streams/destination:other-bus/subscribe", apitest.Acct2Token)
	rd := bufio.NewReader(resp.Body)
	var took []time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		id := r.Publish(apitest.Acct2, 1)[0]
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				b.Fatalf("B's subscription ended: %v", err)
			}
			if strings.HasPrefix(line, "data: ") && strings.Contains(line, id) && strings.Contains(line, "delivery.succeeded") {
				break
			}
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
	cancel()
	r.API.CloseStreams()
	readers.Wait()
}

// open opens a subscription that must answer 200.
func open(b *testing.B, ctx context.Context, client *http.Client, url, token string) *http.Response {
	b.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b.Fatalf("subscribe %s: %d", url, resp.StatusCode)
	}
	b.Cleanup(func() { resp.Body.Close() })
	return resp
}
