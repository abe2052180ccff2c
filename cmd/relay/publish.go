package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/spf13/cobra"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/jobevent"
)

func publishCmd(e env) *cobra.Command {
	var (
		configPath, url, exchange, keyHex, bodyFile string
		job                                         jobevent.Job
		count                                       int
		reemit, tamper                              bool
	)
	cmd := &cobra.Command{
		Use:   "publish",
		Short: "Publish signed job events exactly as the Fetcher Worker does (demos, drills)",
		Long: `publish sends job.completed / job.failed events to the job-events exchange the way the
Fetcher Worker does: persistent, with publisher confirms, CloudEvents binary-mode headers as
byte arrays, signed with signature v1. The broker URL, exchange and key come from --config
(rabbitmq.url, rabbitmq.exchange, the first signature key) unless given as flags.
--reemit sends each event a second time with the same ce-id and body (a repairer's
re-emit); --tamper changes the body after signing (the relay must quarantine it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var key []byte
			if configPath != "" {
				cfg, err := config.Load(configPath, e.getenv)
				if err != nil {
					return err
				}
				if url == "" && len(cfg.RabbitMQ.URLs) > 0 {
					url = cfg.RabbitMQ.URLs[0] // the first node; the cluster routes to the others
				}
				exchange = or(exchange, cfg.RabbitMQ.Exchange)
				if len(cfg.Signature.Keys) > 0 {
					key = cfg.Signature.Keys[0]
				}
			}
			url = or(url, e.getenv("RELAY_RABBITMQ_URL"))
			exchange = or(exchange, "fetcher.job.events")
			if keyHex = or(keyHex, e.getenv("FETCHER_EXTERNAL_HMAC_KEY")); keyHex != "" {
				k, err := hex.DecodeString(keyHex)
				if err != nil || len(k) != 32 {
					return errors.New("--key must be 64 hex characters (the external HMAC key)")
				}
				key = k
			}
			if url == "" || key == nil {
				return errors.New("need a broker URL and a key: --config, or --url and --key (or RELAY_RABBITMQ_URL and FETCHER_EXTERNAL_HMAC_KEY)")
			}
			if job.Status != "completed" && job.Status != "failed" {
				return fmt.Errorf("--status must be completed or failed, not %q", job.Status)
			}
			if bodyFile != "" {
				b, err := os.ReadFile(bodyFile)
				if err != nil {
					return err
				}
				job.Body = b
			}
			return publish(cmd, e, url, exchange, key, job, count, reemit, tamper)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "relay config to take the broker URL, exchange and key from")
	f.StringVar(&url, "url", "", "broker URL (default $RELAY_RABBITMQ_URL)")
	f.StringVar(&exchange, "exchange", "", "job-events exchange (default fetcher.job.events)")
	f.StringVar(&keyHex, "key", "", "external HMAC key in hex (default $FETCHER_EXTERNAL_HMAC_KEY)")
	f.StringVar(&job.Status, "status", "completed", "completed or failed")
	f.StringVar(&job.ID, "job", "", "job UUID (default: a new one per event)")
	f.StringVar(&job.Tenant, "tenant", "single-tenant", "tenant (X-Tenant-ID, ce-tenantid)")
	f.StringVar(&job.Source, "source", "//lerian.fetcher/worker", "ce-source")
	f.StringVar(&job.StoreID, "store-id", "", "metadata.store_id of the body")
	f.StringVar(&bodyFile, "body-file", "", "publish this JSON body instead of a generated one")
	f.IntVar(&count, "count", 1, "how many events (each a new job unless --job is set)")
	f.BoolVar(&reemit, "reemit", false, "publish each event twice, as a repairer re-emit")
	f.BoolVar(&tamper, "tamper", false, "alter the body after signing")
	return cmd
}

func publish(cmd *cobra.Command, e env, url, exchange string, key []byte, job jobevent.Job, count int, reemit, tamper bool) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("connect to broker: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	ctx := cmd.Context()
	var pending []*amqp.DeferredConfirmation
	send := func(j jobevent.Job) error {
		msg := jobevent.Build(j, exchange, key, time.Now())
		if tamper {
			msg.Body = append([]byte(nil), msg.Body...)
			msg.Body[len(msg.Body)-2] ^= 1
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, j.RoutingKey(), false, false, msg)
		if err != nil {
			return err
		}
		pending = append(pending, dc)
		fmt.Fprintf(e.stdout, "published %s %s\n", j.RoutingKey(), j.EventID())
		return nil
	}
	for i := 0; i < count; i++ {
		j := job
		if j.ID == "" {
			j.ID = newUUID()
		}
		if err := send(j); err != nil {
			return err
		}
		if reemit {
			if err := send(j); err != nil {
				return err
			}
		}
	}
	for _, dc := range pending {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("broker did not confirm a publish (ok=%v, err=%v)", ok, err)
		}
	}
	return nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])  // crypto/rand.Read never fails on Linux
	b[6] = b[6]&0x0f | 0x70 // version 7 shape, like the Worker's job ids
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
