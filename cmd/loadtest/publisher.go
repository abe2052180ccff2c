package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/jobevent"
)

// event is one job event the load publishes, built (and signed) once: a resend after a
// lost confirm is the same message, as a Worker's retry would be.
type event struct {
	id, key   string
	msg       amqp.Publishing
	sentAt    time.Time // first publish
	confirmed bool
	sends     int
	// Where its sends fall in the publisher's sequence of publishes: the first one, the
	// last one, and the one the broker confirmed (0: none). They order events (orderBreaks).
	firstSeq, lastSeq, confirmSeq int
}

func newEvent(exchange string, key []byte, seq int, status string) *event {
	j := jobevent.Job{ID: uuid(), Status: status, StoreID: fmt.Sprintf("store-%d", seq%50)}
	return &event{id: j.EventID(), key: j.RoutingKey(), msg: jobevent.Build(j, exchange, key, time.Now())}
}

func uuid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// publisher publishes with confirms and reconnects when the broker goes away: to the
// next of urls (the nodes of a cluster) after a node fails, to the one URL otherwise.
type publisher struct {
	urls       []string
	exchange   string
	next       int // index in urls of the node to try next
	conn       *amqp.Connection
	ch         *amqp.Channel
	reconnects int
	resends    int
	seq        int // publishes so far, over every connection
}

func (p *publisher) close() {
	if p.conn != nil {
		p.conn.Close()
	}
	p.conn, p.ch = nil, nil
}

func (p *publisher) connect(ctx context.Context) error {
	for {
		url := p.urls[p.next%len(p.urls)]
		conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err == nil {
			ch, err2 := conn.Channel()
			if err2 == nil {
				err2 = ch.Confirm(false)
			}
			if err2 == nil {
				p.conn, p.ch = conn, ch
				return nil
			}
			conn.Close()
			err = err2
		}
		p.next++
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker unreachable: %w (last: %v)", ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// send publishes every event of batch until the broker confirms it, reconnecting as
// often as needed, or until ctx ends (what is left stays unconfirmed).
func (p *publisher) send(ctx context.Context, batch []*event) {
	for {
		var todo []*event
		for _, e := range batch {
			if !e.confirmed {
				todo = append(todo, e)
			}
		}
		if len(todo) == 0 || ctx.Err() != nil {
			return
		}
		if p.ch == nil || p.ch.IsClosed() {
			p.close()
			if err := p.connect(ctx); err != nil {
				return
			}
			p.reconnects++
		}
		dcs := make([]*amqp.DeferredConfirmation, len(todo))
		failed := false
		for i, e := range todo {
			if e.sends == 0 {
				e.sentAt = time.Now()
			} else {
				p.resends++
			}
			e.sends++
			p.seq++
			e.lastSeq = p.seq
			if e.firstSeq == 0 {
				e.firstSeq = p.seq
			}
			dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, e.key, false, false, e.msg)
			if err != nil {
				failed = true
				break
			}
			dcs[i] = dc
		}
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		for i, dc := range dcs {
			if dc == nil {
				continue
			}
			ok, err := dc.WaitContext(wctx)
			if err == nil && ok {
				todo[i].confirmed = true
				todo[i].confirmSeq = todo[i].lastSeq
			} else {
				failed = true
			}
		}
		cancel()
		if failed {
			p.close() // a fresh channel for the resends, on the next node if there are several
			p.next++
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}
