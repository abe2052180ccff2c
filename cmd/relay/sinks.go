package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/ratelimit"
	"github.com/mercamap/relay/internal/sinks/eventbridge"
	"github.com/mercamap/relay/internal/sinks/kinesis"
	"github.com/mercamap/relay/internal/sinks/pubsub"
	"github.com/prometheus/client_golang/prometheus"
)

// buildSinks makes one Sink per connector from the config. Our own cloud identities
// (the AWS default credential chain, Google's Application Default Credentials) are
// only looked up when a write needs them, so a relay without cloud credentials still
// starts and shows "did not take the event" on those destinations' cards.
// stsTracer, when set, gets a span for each STS setup; budget keeps the STS budget's
// buckets (the store's, shared by every replica).
func buildSinks(ctx context.Context, cfg *config.Config, reg prometheus.Registerer, log *slog.Logger, stsTracer assume.Tracer,
	budget ratelimit.Limiter) (map[destination.Connector]dispatch.Sink, func(), error) {
	awsCfg, err := assume.OwnConfig(ctx, cfg.AWS.Region)
	if err != nil {
		return nil, nil, fmt.Errorf("aws: %w", err)
	}
	awsCfg.Logger = awsLog(log.With("component", "aws-sdk")) // every client made from it
	name := cfg.Identity.NameOrDefault()
	assumer := assume.New(assume.Options{
		STS:          assume.NewSTSClient(awsCfg, cfg.AWS.Endpoints["sts"]),
		IdentityName: name,
		PrincipalARN: cfg.Identity.AWSPrincipalARN,
		Budget:       cfg.AWS.STSBudget,
		Limiter:      budget,
		Backoff:      cfg.AWS.SessionBackoff,
		Metrics:      assume.NewMetrics(reg),
		Tracer:       stsTracer,
	})
	ps := pubsub.New(ctx, pubsub.Options{
		Identity: cfg.Identity,
		Endpoint: cfg.GCP.PubSubEndpoint,
		Recheck:  cfg.Delivery.LabelRecheck,
	})
	sinks := map[destination.Connector]dispatch.Sink{
		destination.EventBridge: eventbridge.New(eventbridge.Options{AWS: awsCfg, Assumer: assumer, IdentityName: name,
			Endpoint: cfg.AWS.Endpoints["events"]}),
		destination.Kinesis: kinesis.New(kinesis.Options{AWS: awsCfg, Assumer: assumer, Endpoint: cfg.AWS.Endpoints["kinesis"]}),
		destination.PubSub:  ps,
	}
	return sinks, func() { _ = ps.Close() }, nil
}
