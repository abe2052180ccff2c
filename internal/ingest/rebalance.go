package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Rebalancing: with partitions, each replica consumes every partition queue and hands
// the ones over its share to the others.

// partition is one queue this session consumes, its subscription, and what rebalance
// knows of it.
type partition struct {
	queue string
	sub   *subscription // set by the session, then by consume alone (a handover's new one)
	last  atomic.Int64  // UnixNano of the last batch taken from it; 0 since (re)subscribing
	yield atomic.Bool   // rebalance asks to hand it to another replica
	// yieldNow wakes a batches loop waiting for deliveries when rebalance sets yield: a
	// partition that went quiet right after it was counted hands over all the same.
	yieldNow chan struct{}
}

// errYield ends a subscription that rebalance hands to another replica.
var errYield = errors.New("partition handed to another replica")

// consume takes batches from p's subscription until ctx is cancelled or the connection
// fails. When rebalance asks, it settles the batch in hand, closes the subscription and
// subscribes again: it then waits behind the other replicas' consumers.
func (c *Consumer) consume(ctx context.Context, s *session, p *partition) error {
	for {
		err := c.batches(ctx, p, p.sub)
		if !errors.Is(err, errYield) {
			return err
		}
		p.sub.close()
		p.last.Store(0)
		p.yield.Store(false)
		select { // a wake-up left from the handover just made
		case <-p.yieldNow:
		default:
		}
		c.opts.Metrics.PartitionHandovers.Inc()
		c.opts.Logger.Info("partition handed over to another replica", "queue", p.queue)
		sub, err := c.subscribe(s, p.queue)
		if err != nil {
			return err // p.sub, closed, is stopped again by the session: a no-op
		}
		p.sub = sub
	}
}

// rebalance spreads the partitions over the replicas. Every replica consumes every
// partition, and the broker delivers each to one of them at a time (single active
// consumer): the first to subscribe, so one replica would hold them all. Each round it
// counts the replicas (the consumers of ReplicasQueue, one per replica) and, when this
// one took batches from more partitions than its share (partitions ÷ replicas, rounded
// up), hands the excess over: after the batch in hand, it closes that subscription and
// subscribes again, behind the others, and the broker gives the partition to the next
// replica, starting with the messages left unacked.
func (c *Consumer) rebalance(ctx context.Context, conn *amqp.Connection, parts []*partition) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open replicas channel: %w", err)
	}
	name := c.opts.Topology.ReplicasQueue() // the channel closes with the connection
	// Registered after every partition's consumer, so a replica counted here is waiting
	// on each partition and can take one over.
	presence, err := ch.Consume(name, "", true, false, false, false, nil) // not WithContext: see subscribe
	if err != nil {
		return fmt.Errorf("consume %q: %w", name, err)
	}
	go func() {
		for range presence { // nothing is published to it; drop whatever is
		}
	}()
	every := c.opts.Rebalance
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("count the replicas on %q: %w", name, err)
		}
		replicas := max(q.Consumers, 1)
		share := (len(parts) + replicas - 1) / replicas
		since := time.Now().Add(-every).UnixNano()
		active := 0
		for _, p := range parts {
			busy := p.last.Load() > since && !p.yield.Load()
			if busy {
				active++
			}
			if busy && active > share {
				p.yield.Store(true)
				select {
				case p.yieldNow <- struct{}{}:
				default:
				}
			}
		}
		c.opts.Metrics.PartitionsActive.Set(float64(min(active, share)))
	}
}
