package ingest

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Ingest lag, read at scrape time: the relay queue's depth and consumers (a passive
// declare on a channel of ingest's own connection, opened and closed per scrape) and the
// age of the oldest message this replica holds unacked.

// lagCollector is the prometheus.Collector of Consumer.LagCollector.
type lagCollector struct {
	c                                 *Consumer
	ready, consumers, oldest, connect *prometheus.Desc
}

// LagCollector exports ingest's lag: relay_ingest_queue_messages and
// relay_ingest_queue_consumers (absent while not connected), relay_ingest_oldest_unacked_age_seconds,
// and relay_broker_connected.
func (c *Consumer) LagCollector() prometheus.Collector {
	return &lagCollector{c: c,
		ready: prometheus.NewDesc("relay_ingest_queue_messages",
			"Messages ready in the relay's queue: taken by no consumer yet (the broker's count, read at scrape).", nil, nil),
		consumers: prometheus.NewDesc("relay_ingest_queue_consumers",
			"Consumers of the relay's queue (every replica's ingest; with single active consumer only one receives).", nil, nil),
		oldest: prometheus.NewDesc("relay_ingest_oldest_unacked_age_seconds",
			"How long this replica has held its oldest unacked message (received, not yet stored and acked); 0 when it holds none.", nil, nil),
		connect: prometheus.NewDesc("relay_broker_connected",
			"1 while ingest holds a live connection to the broker.", nil, nil),
	}
}

func (l *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.ready
	ch <- l.consumers
	ch <- l.oldest
	ch <- l.connect
}

func (l *lagCollector) Collect(ch chan<- prometheus.Metric) {
	connected := 0.0
	if l.c.Connected() {
		connected = 1
	}
	ch <- prometheus.MustNewConstMetric(l.connect, prometheus.GaugeValue, connected)
	age := 0.0
	if since := l.c.heldSince.Load(); since != 0 {
		age = max(time.Since(time.Unix(0, since)).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(l.oldest, prometheus.GaugeValue, age)
	if q, ok := l.c.inspectQueue(2 * time.Second); ok {
		ch <- prometheus.MustNewConstMetric(l.ready, prometheus.GaugeValue, float64(q.Messages))
		ch <- prometheus.MustNewConstMetric(l.consumers, prometheus.GaugeValue, float64(q.Consumers))
	}
}

// inspectQueue reads the relay queue's (or its partitions') counts through the live connection, giving up
// after limit (amqp091-go's calls take no context); false when there is none or it failed.
func (c *Consumer) inspectQueue(limit time.Duration) (amqp.Queue, bool) {
	conn := c.conn.Load()
	if conn == nil {
		return amqp.Queue{}, false
	}
	type result struct {
		q  amqp.Queue
		ok bool
	}
	done := make(chan result, 1)
	go func() {
		ch, err := conn.Channel()
		if err != nil {
			done <- result{}
			return
		}
		defer ch.Close()
		// Passive: only asks; the queue's arguments are ingest's to declare. With
		// partitions: their messages summed, and the fewest consumers any of them has
		// (a partition nobody consumes is the one to see).
		var sum amqp.Queue
		for i, name := range c.opts.Topology.Queues() {
			q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
			if err != nil {
				done <- result{}
				return
			}
			sum.Messages += q.Messages
			if i == 0 || q.Consumers < sum.Consumers {
				sum.Consumers = q.Consumers
			}
		}
		done <- result{sum, true}
	}()
	select {
	case r := <-done:
		return r.q, r.ok
	case <-time.After(limit):
		return amqp.Queue{}, false
	}
}
