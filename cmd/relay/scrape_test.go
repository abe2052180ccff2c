package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// scrapeTimeout is Prometheus' default scrape_timeout less a margin: a scrape must answer
// within it whatever Redis does, or the target shows as down exactly when Redis is.
const scrapeTimeout = 5 * time.Second

// A Redis that accepts connections and never answers (here: SIGSTOPped) must not hold a
// scrape: /metrics answers within the scrape timeout, says Redis is down, and shows the
// last lag sample rather than waiting for a new one.
func TestAScrapeAnswersInTimeWhileRedisHangs(t *testing.T) {
	r := startObservedRelay(t, "")
	lagLine := `relay_destination_lag_events{account="acct_1",connector="eventbridge",destination="orders-bus"}`
	waitUntil(t, 60*time.Second, "a lag sample and relay_redis_up 1", func() bool {
		page := metrics(r.metricsListen)
		return strings.Contains(page, lagLine) && strings.Contains(page, "relay_redis_up 1")
	})

	opts, err := redis.ParseURL(r.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	info, err := rdb.InfoMap(context.Background(), "server").Result()
	rdb.Close()
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, section := range info {
		if v, ok := section["process_id"]; ok {
			if pid, err = strconv.Atoi(v); err != nil {
				t.Fatalf("process_id %q: %v", v, err)
			}
		}
	}
	if pid == 0 {
		t.Fatal("INFO server has no process_id")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	for i := range 3 {
		start := time.Now()
		page := metrics(r.metricsListen)
		took := time.Since(start)
		if took > scrapeTimeout {
			t.Errorf("scrape %d with Redis hung took %v, over %v", i+1, took, scrapeTimeout)
		}
		if !strings.Contains(page, "relay_redis_up 0") {
			t.Errorf("scrape %d with Redis hung: relay_redis_up is not 0", i+1)
		}
		if !strings.Contains(page, lagLine) {
			t.Errorf("scrape %d with Redis hung lost the last lag sample", i+1)
		}
	}
}
