// Command benchingest measures the relay's ingest beside a bare RabbitMQ consumer in the
// same run, so the relay's rate is read as a ratio of what the broker allows on this
// machine. It only talks to the loopback peers it is given (scripts/bench-ingest.sh
// starts private ones) and deletes every queue, exchange and key it made.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchingest:", err)
		os.Exit(1)
	}
}

// run parses the flags, measures -runs rounds of (bare, relay) and prints the report.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	b, err := newBench(cfg, stderr)
	if err != nil {
		return err
	}
	defer b.close()
	load := loadAverage()
	results, err := b.measure(ctx)
	if err != nil {
		return err
	}
	report(stdout, cfg, results, load)
	if cfg.summary != "" {
		return appendSummary(cfg.summary, summarize(cfg, results))
	}
	return nil
}

// config is what the flags ask for.
type config struct {
	amqpURL, redisURL string
	events            int // per path per run
	size              int // body bytes
	runs              int
	warmup            int  // events per path before the first run, not reported
	prefetch          int  // both consumers
	window            int  // unconfirmed publishes in flight
	prefill           bool // fill the queue first, then time the consumer alone
	flushDB           bool
	cpuProfile        string
	peerPIDs          []peerPID
	timeout           time.Duration // per phase
	redisLabel        string        // what -redis is, for the report's heading
	summary           string        // file the run's ratios are appended to, one JSON line
}

// peerPID names a peer process whose CPU time is read from /proc during each phase.
type peerPID struct {
	name string
	pid  int
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	var pids string
	fs := flag.NewFlagSet("benchingest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage: benchingest [flags]

Publishes -n signed job events per run, once to a bare amqp091-go consumer and once to an
in-process ingest.Consumer writing to Redis, and prints both rates and their ratio.
Both URLs must point at 127.0.0.1; scripts/bench-ingest.sh starts private peers.

`)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.amqpURL, "amqp", getenv("RELAY_TEST_AMQP_URL"), "broker URL (default $RELAY_TEST_AMQP_URL)")
	fs.StringVar(&c.redisURL, "redis", getenv("RELAY_TEST_REDIS_URL"), "Redis URL (default $RELAY_TEST_REDIS_URL)")
	fs.IntVar(&c.events, "n", 50000, "events per path per run")
	fs.IntVar(&c.size, "size", 1024, "body bytes (the body's metadata is padded to this size)")
	fs.IntVar(&c.runs, "runs", 3, "runs; the report gives each and their median")
	fs.IntVar(&c.warmup, "warmup", 5000, "events per path in an unreported warm-up round (0: none)")
	fs.IntVar(&c.prefetch, "prefetch", 256, "prefetch of both consumers")
	fs.IntVar(&c.window, "outstanding", 256, "unconfirmed publishes in flight")
	fs.BoolVar(&c.prefill, "prefill", false, "fill each queue first and time the consumer alone (default: publish and consume at once)")
	fs.BoolVar(&c.flushDB, "flushdb", false, "FLUSHDB after each run: only for a Redis dedicated to the benchmark (default: delete the run's keys)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the first measured relay phase to this file")
	fs.StringVar(&pids, "peer-pids", "", "peer processes to report CPU for, like rabbitmq=123,redis=456")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "longest a phase may take")
	fs.StringVar(&c.summary, "summary", "", "append the relay/bare ratios of the runs to this file, one JSON line (scripts/bench.sh judges the aims from it)")
	fs.StringVar(&c.redisLabel, "redis-label", "", "what -redis is (e.g. Redis Cluster, 3 masters + 3 replicas), named in the report's heading")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.events < 1 || c.size < 1 || c.runs < 1 || c.warmup < 0 || c.prefetch < 1 || c.window < 1 {
		return c, errors.New("-n, -size, -runs, -prefetch and -outstanding must be positive, -warmup not negative")
	}
	for name, u := range map[string]string{"-amqp": c.amqpURL, "-redis": c.redisURL} {
		if err := loopbackOnly(u); err != nil {
			return c, fmt.Errorf("%s: %w", name, err)
		}
	}
	if pids != "" {
		for _, kv := range strings.Split(pids, ",") {
			name, v, ok := strings.Cut(kv, "=")
			pid, err := strconv.Atoi(v)
			if !ok || err != nil || pid < 1 {
				return c, fmt.Errorf("-peer-pids: %q is not name=pid", kv)
			}
			c.peerPIDs = append(c.peerPIDs, peerPID{name, pid})
		}
	}
	return c, nil
}

// loopbackOnly refuses a URL that would send the load anywhere but this machine.
func loopbackOnly(raw string) error {
	if raw == "" {
		return errors.New("is required (or set RELAY_TEST_AMQP_URL / RELAY_TEST_REDIS_URL)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("is not a URL")
	}
	switch u.Hostname() {
	case "127.0.0.1", "localhost", "::1":
		return nil
	}
	return fmt.Errorf("host %q is not loopback: the benchmark only loads local peers", u.Hostname())
}
