package notify

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/testpeer"
)

func TestDisabledEventReachesTheOperatorEventsExchange(t *testing.T) {
	url := testpeer.SharedRabbitMQ(t)
	exchange := fmt.Sprintf("relay-test-operator-%d", time.Now().UnixNano())
	p := New(url, exchange)
	defer p.Close()
	ctx := context.Background()
	// The first publish declares the exchange; the platform's mailer binds its queue to it.
	if err := p.Notify(ctx, "destination.disabled", []byte(`{"warmup":true}`)); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "destination.#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	body := `{"type":"destination.disabled","destination":"orders-bus"}`
	if err := p.Notify(ctx, "destination.disabled", []byte(body)); err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get(q.Name, true)
	if err != nil || !ok {
		t.Fatalf("no operator event in the mailer's queue: ok=%v err=%v", ok, err)
	}
	if string(d.Body) != body || d.RoutingKey != "destination.disabled" || d.DeliveryMode != amqp.Persistent {
		t.Fatalf("got %q via %q (mode %d)", d.Body, d.RoutingKey, d.DeliveryMode)
	}
}
