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
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadtest drill|bench|redis-cluster [flags] (see scripts/drill.sh, scripts/bench.sh)")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "drill":
		err = runDrill(ctx, os.Args[2:])
	case "bench":
		err = runBench(ctx, os.Args[2:])
	case "redis-cluster":
		err = runRedisCluster(ctx, os.Args[2:])
	case "bus":
		err = runBus(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q: drill, bench or redis-cluster", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
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
