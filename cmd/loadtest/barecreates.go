package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/registry"
	"github.com/mercamap/relay/internal/store"
)

// createChunk is one chunk of the API rows' creates, through the API or bare: how many,
// how long (first call to the last STS call they caused), and the STS calls, Redis
// commands (INFO commandstats, scripts' own commands included) and Redis CPU meanwhile.
type createChunk struct {
	n          int
	took       time.Duration
	sts        int64
	redisCalls int64
	redisCPU   time.Duration
	err        string
}

func (c createChunk) perSec() float64 { return float64(c.n) / c.took.Seconds() }

// bareCreates is the yardstick of the creates through the API: what a create must do
// in Redis and STS, done by as many clients with no HTTP, no API and no relay. For each
// destination: the registry's record (registry.Create) and the clean slate of its state
// (store.Forget), the relay's own scripts on a database of their own of the same server
// (so the relay's follower never sees them), then the contract's setup check: the probe
// (a wrong ExternalId under the deny-all policy, refused) and the session (its own
// ExternalId, the one-write policy).
type bareCreates struct {
	rdb   *redis.Client
	reg   *registry.Registry
	st    *store.Store
	sts   *sts.Client
	pool  *awshttp.BuildableClient
	dests []destination.Destination
	n     int
}

// bareCreatesDB is the database number of the bare creates' records.
const bareCreatesDB = 1

func (e *benchEnv) newBareCreates(ctx context.Context, redisURL string, n int) (*bareCreates, error) {
	o := mustRedisOpts(redisURL)
	o.DB = bareCreatesDB
	b := &bareCreates{rdb: redis.NewClient(o), n: n, dests: make([]destination.Destination, n),
		pool: awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxConnsPerHost, t.MaxIdleConnsPerHost, t.MaxIdleConns = apiClients, apiClients, apiClients
		})}
	if err := b.rdb.FlushDB(ctx).Err(); err != nil {
		b.close()
		return nil, fmt.Errorf("bare creates: %w", err)
	}
	b.reg, b.st = registry.New(b.rdb), store.New(b.rdb)
	b.sts = sts.New(sts.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.stsURL), HTTPClient: b.pool, Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDBENCH", "bench-not-a-secret", "")})
	for i := range b.dests {
		b.dests[i] = destination.Destination{ID: "b" + strconv.Itoa(i), Account: "acct_bench", Connector: destination.EventBridge,
			BusARN:     fmt.Sprintf("arn:aws:events:us-east-1:111122223333:event-bus/bench-bare-create-%d", i),
			RoleARN:    fmt.Sprintf("arn:aws:iam::111122223333:role/bench-bare-create-%d", i),
			ExternalID: destination.NewExternalID()}
		e.sts.RequireExternalID(b.dests[i].RoleARN, b.dests[i].ExternalID)
	}
	return b, nil
}

// run creates destinations from … to-1 bare, apiClients at a time.
func (b *bareCreates) run(ctx context.Context, e *benchEnv, from, to int) createChunk {
	sts0, calls0, cpu0 := e.stsCalls.Load(), redisCalls(ctx, b.rdb), redisCPUTotal(ctx, b.rdb)
	var mu sync.Mutex
	var first error
	start := time.Now()
	clients(ctx, apiClients, from, to, func(i int) {
		if err := b.create(ctx, b.dests[i]); err != nil {
			mu.Lock()
			first = cmpOr(first, err)
			mu.Unlock()
		}
	})
	c := createChunk{n: to - from, took: time.Since(start), sts: e.stsCalls.Load() - sts0,
		redisCalls: redisCalls(ctx, b.rdb) - calls0, redisCPU: redisCPUTotal(ctx, b.rdb) - cpu0}
	if first != nil {
		c.err = first.Error()
	}
	return c
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (b *bareCreates) create(ctx context.Context, d destination.Destination) error {
	rec := registry.Record{ID: d.ID, Account: d.Account, Connector: string(d.Connector), BusARN: d.BusARN, RoleARN: d.RoleARN,
		ExternalID: d.ExternalID, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if _, _, err := b.reg.Create(ctx, rec, "", b.n+1); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if err := b.st.Forget(ctx, store.Ref{Account: d.Account, ID: d.ID}); err != nil {
		return fmt.Errorf("forget: %w", err)
	}
	_, err := b.sts.AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(d.RoleARN), RoleSessionName: aws.String("mercamap-acct_bench"),
		ExternalId: aws.String(destination.NewExternalID()), Policy: aws.String(destination.DenyAllPolicy()), DurationSeconds: aws.Int32(900)})
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "AccessDenied" {
		return fmt.Errorf("probe of %s: want AccessDenied, got %v", d.RoleARN, err)
	}
	if _, err := b.sts.AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(d.RoleARN), RoleSessionName: aws.String("mercamap-acct_bench"),
		ExternalId: aws.String(d.ExternalID), Policy: aws.String(destination.SessionPolicy(d)), DurationSeconds: aws.Int32(900)}); err != nil {
		return fmt.Errorf("session of %s: %w", d.RoleARN, err)
	}
	return nil
}

func (b *bareCreates) close() {
	b.rdb.FlushDB(context.Background())
	b.rdb.Close()
	b.pool.GetTransport().CloseIdleConnections()
}

// clients runs fn(i) for i = from … to-1 on k goroutines, each taking the next i.
func clients(ctx context.Context, k, from, to int, fn func(i int)) {
	var mu sync.Mutex
	next := from
	var wg sync.WaitGroup
	for range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= to {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// quiet runs fn and then waits until STS has taken no call for half a second (at most
// 30 s): the creates' setup checks run after their answers. It returns the time from
// fn's start to its end or to the last STS call seen, whichever is later.
func (e *benchEnv) quiet(fn func()) time.Duration {
	start := time.Now()
	fn()
	end := time.Now()
	seen := e.stsCalls.Load()
	for still := time.Now(); time.Since(still) < 500*time.Millisecond && time.Since(end) < 30*time.Second; {
		time.Sleep(20 * time.Millisecond)
		if n := e.stsCalls.Load(); n != seen {
			seen, still = n, time.Now()
			end = still
		}
	}
	return end.Sub(start)
}

// redisCalls is the number of commands the server behind rdb has run (INFO
// commandstats, every calls= summed); 0 when it cannot be read.
func redisCalls(ctx context.Context, rdb redis.UniversalClient) int64 {
	var total int64
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(line, "calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(v, 10, 64)
		total += n
	}
	return total
}

// redisCPUTotal is the CPU every master behind rdb has spent so far (INFO cpu).
func redisCPUTotal(ctx context.Context, rdb redis.UniversalClient) time.Duration {
	m, _ := redisCPU(ctx, rdb)
	return total(m)
}
