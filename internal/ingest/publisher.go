package ingest

import (
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Quarantine copies go out on a connection of their own, never on the one that
// consumes. RabbitMQ blocks a connection that publishes while a resource alarm (memory,
// disk) is raised: it stops reading from its socket, acks included. A flood of large junk
// can raise that alarm, and with the copies on the consuming connection its acks waited
// behind the alarm while the alarm waited behind the acks (the flood stays in the queue
// until acked): ingest stalled, signed events behind the flood with it. Apart, only the
// copies wait, and while the broker blocks them ingest quarantines by dead-lettering
// instead: the broker moves the original to the quarantine exchange itself, which no
// alarm holds back.

// pubCloseWait bounds the close of the quarantine connection: the broker does not answer
// it while it blocks the connection.
const pubCloseWait = 2 * time.Second

// openPublisher opens the quarantine connection to url and follows the broker's
// connection.blocked notices on it.
func openPublisher(url string, log *slog.Logger) (*amqp.Connection, *flowGate, error) {
	conn, _, err := dialFiltered(url, amqp.Config{
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": "relay-quarantine"},
	})
	if err != nil {
		return nil, nil, err
	}
	gate := &flowGate{blocked: make(chan struct{})}
	notices := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	go func() { // ends when the connection closes (amqp091-go closes notices)
		for b := range notices {
			switch {
			case !gate.set(b.Active):
			case b.Active:
				log.Warn("the broker blocks publishing (a resource alarm): messages that fail verification go to the quarantine whole, by dead-lettering, until it ends", "alarm", b.Reason)
			default:
				log.Info("the broker takes publishes again: quarantine copies resume")
			}
		}
	}()
	return conn, gate, nil
}

// flowGate says whether the broker blocks the quarantine connection.
type flowGate struct {
	mu      sync.Mutex
	on      bool
	blocked chan struct{} // closed while blocked; a fresh one once the block ends
}

// set records a notice; it reports whether the state changed.
func (g *flowGate) set(on bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if on == g.on {
		return false
	}
	g.on = on
	if on {
		close(g.blocked)
	} else {
		g.blocked = make(chan struct{})
	}
	return true
}

// whenBlocked returns a channel closed while the broker blocks the connection (at once
// if it does now).
func (g *flowGate) whenBlocked() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.blocked
}

// isBlocked reports whether the broker blocks the connection now.
func (g *flowGate) isBlocked() bool {
	select {
	case <-g.whenBlocked():
		return true
	default:
		return false
	}
}
