// Command loadtest runs the relay end to end on loopback peers: `drill` (a fault drill:
// replicas killed, the broker and Redis restarted, under a steady publish load, then a
// delivery check, on one server each or, with -cluster, on a Redis Cluster and a RabbitMQ
// cluster of its own), `bench` (deliveries/s and publish-to-bus latency for N
// destinations), `redis-cluster` (holds a private Redis Cluster for scripts/bench.sh) and
// `bus` (the bench's stamped EventBridge, a child process of `bench`). scripts/drill.sh
// and scripts/bench.sh start the peers and run it; it only ever talks to 127.0.0.1.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		os.Exit(exitCode(err, os.Stderr))
	}
}

// errUsage is run's error when no mode is named: the usage is written already.
var errUsage = errors.New("usage")

// exitCode writes err, unless it is errUsage, and returns the exit status for it: 2 for
// errUsage, 1 otherwise.
func exitCode(err error, stderr io.Writer) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	fmt.Fprintln(stderr, "loadtest:", err)
	return 1
}

// run runs the mode args name with the rest of args as its flags. Reports go to stdout;
// progress is logged to the process's stderr (logf).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) < 1 {
		fmt.Fprintln(stderr, "usage: loadtest drill|bench|redis-cluster [flags] (see scripts/drill.sh, scripts/bench.sh)")
		return errUsage
	}
	switch args[0] {
	case "drill":
		return runDrill(ctx, args[1:], stdout)
	case "bench":
		return runBench(ctx, args[1:], stdout)
	case "redis-cluster":
		return runRedisCluster(ctx, args[1:])
	case "bus":
		return runBus(ctx, args[1:], stdout)
	}
	return fmt.Errorf("unknown mode %q: drill, bench or redis-cluster", args[0])
}

// loopback refuses any URL whose host is not 127.0.0.1 / localhost.
func loopback(name, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("-%s %q: %w", name, raw, err)
	}
	h := u.Hostname()
	if h != "127.0.0.1" && h != "localhost" && h != "::1" {
		return fmt.Errorf("-%s %q: only 127.0.0.1 is allowed", name, raw)
	}
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "loadtest: "+format+"\n", args...)
}

func short(id string) string { return strings.TrimPrefix(id, "fetcher.job.") }
