package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/ingest"
	"github.com/mercamap/relay/internal/notify"
	"github.com/mercamap/relay/internal/signature"
	"github.com/mercamap/relay/internal/store"
)

func serveCmd(e env) *cobra.Command {
	var path, logLevel string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the relay: ingest from RabbitMQ, deliver to destinations, serve the API",
		Long: `serve loads the config (refusing to start on any problem check-config reports),
consumes the job-events queue, stores each verified event in Redis before acking it, and
runs until SIGINT or SIGTERM, when it finishes the messages in hand and exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log := slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: level}))
			cfg, err := config.Load(path, e.getenv)
			if err != nil {
				return err
			}
			return serve(cmd.Context(), e, cfg, log)
		},
	}
	cmd.Flags().StringVar(&path, "config", "relay.yaml", "path of the YAML config")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

func serve(ctx context.Context, e env, cfg *config.Config, log *slog.Logger) error {
	st, err := store.Open(cfg.Redis.URL)
	if err != nil {
		return fmt.Errorf("redis.url: %w", err)
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	consumer := ingest.New(ingest.Options{
		URL: cfg.RabbitMQ.URL,
		Topology: ingest.Topology{
			Exchange:           cfg.RabbitMQ.Exchange,
			Queue:              cfg.RabbitMQ.Queue,
			RoutingKeys:        cfg.RabbitMQ.RoutingKeys,
			QuarantineExchange: cfg.RabbitMQ.QuarantineExchange,
			QuarantineQueue:    cfg.RabbitMQ.QuarantineQueue,
		},
		Prefetch: cfg.RabbitMQ.Prefetch,
		Verifier: signature.Verifier{
			Keys:      cfg.Signature.Keys,
			MaxAge:    cfg.Signature.MaxAge,
			MaxFuture: cfg.Signature.MaxFuture,
		},
		Store:        st,
		Router:       cfg,
		DedupWindow:  cfg.DedupWindow,
		LogRetention: cfg.DedupWindow,
		Logger:       log.With("component", "ingest"),
		Metrics:      ingest.NewMetrics(reg),
		AfterAppend:  failpoint(e.getenv("RELAY_TEST_FAILPOINT")),
	})
	sinks, closeSinks, err := buildSinks(ctx, cfg)
	if err != nil {
		return err
	}
	defer closeSinks()
	notifier := notify.New(cfg.RabbitMQ.URL, cfg.Delivery.OperatorEventsExchange)
	defer notifier.Close()
	disp := dispatch.New(dispatch.Options{
		Store:    st,
		Sinks:    sinks,
		Delivery: cfg.Delivery,
		Owner:    replicaName(),
		Accounts: cfg.Accounts,
		Notifier: notifier,
		Logger:   log.With("component", "dispatch"),
		Metrics:  dispatch.NewMetrics(reg),
	})
	if err := disp.SetDestinations(ctx, cfg.Destinations); err != nil {
		return fmt.Errorf("load destination state from redis: %w", err)
	}

	log.Info("relay starting", "accounts", len(cfg.Accounts), "destinations", len(cfg.Destinations))
	var wg sync.WaitGroup
	var ingestErr error
	wg.Add(2)
	go func() { defer wg.Done(); ingestErr = consumer.Run(ctx) }()
	go func() { defer wg.Done(); _ = disp.Run(ctx) }()
	wg.Wait()
	log.Info("relay stopped")
	return ingestErr
}

// replicaName names this process in destination leases: unique per start.
func replicaName() string {
	host, _ := os.Hostname()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}

// failpoint returns the hook a failure drill asks for through RELAY_TEST_FAILPOINT:
// "kill-after-append" dies by SIGKILL once a batch is in Redis and before it is acked.
func failpoint(name string) func() {
	if name != "kill-after-append" {
		return nil
	}
	return func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
}
