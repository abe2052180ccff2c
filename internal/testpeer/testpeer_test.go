package testpeer

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

func TestRedisWithAOFKeepsKeysAcrossStopAndKill(t *testing.T) {
	t.Parallel()
	r := StartRedis(t, WithAOF())
	ctx := context.Background()

	set := func(key string) {
		t.Helper()
		c := redis.NewClient(&redis.Options{Addr: r.Addr()})
		defer c.Close()
		if err := c.Set(ctx, key, "v-"+key, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	get := func(key string) string {
		t.Helper()
		opts, err := redis.ParseURL(r.URL())
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(opts)
		defer c.Close()
		v, err := c.Get(ctx, key).Result()
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		return v
	}

	set("stopped")
	r.Stop(t)
	r.Start(t)
	if v := get("stopped"); v != "v-stopped" {
		t.Fatalf("after Stop/Start: got %q", v)
	}

	set("killed")
	r.Kill(t)
	r.Start(t)
	if v := get("killed"); v != "v-killed" {
		t.Fatalf("after Kill/Start: got %q", v)
	}
}

func TestRedisWithoutAOFForgetsKeysOnRestart(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Stop(t)
	r.Start(t)
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k after restart = %d, %v; want 0", n, err)
	}
}

func TestRabbitMQKeepsPersistentMessageAcrossRestart(t *testing.T) {
	t.Parallel()
	began := time.Now()
	b := StartRabbitMQ(t)
	t.Logf("StartRabbitMQ took %v", time.Since(began).Round(time.Millisecond))
	const queue = "testpeer.restart"

	ch := openChannel(t, b.URL())
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, queue, "survives")
	ch.Close()

	began = time.Now()
	b.Stop(t)
	t.Logf("Stop took %v", time.Since(began).Round(time.Millisecond))
	began = time.Now()
	b.Start(t)
	t.Logf("Start (restart) took %v", time.Since(began).Round(time.Millisecond))

	ch = openChannel(t, b.URL())
	msg, ok, err := ch.Get(queue, true)
	if err != nil || !ok {
		t.Fatalf("Get after restart: ok=%v err=%v", ok, err)
	}
	if string(msg.Body) != "survives" {
		t.Fatalf("body after restart = %q", msg.Body)
	}
}

func TestSharedRabbitMQServesUniqueQueues(t *testing.T) {
	t.Parallel()
	began := time.Now()
	url := SharedRabbitMQ(t)
	t.Logf("SharedRabbitMQ took %v", time.Since(began).Round(time.Millisecond))
	if again := SharedRabbitMQ(t); again != url {
		t.Fatalf("second call returned %s, first %s", again, url)
	}

	ch := openChannel(t, url)
	queue := fmt.Sprintf("testpeer.shared.%d", time.Now().UnixNano())
	if _, err := ch.QueueDeclare(queue, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, queue, "hello")
	if msg, ok, err := ch.Get(queue, true); err != nil || !ok || string(msg.Body) != "hello" {
		t.Fatalf("Get: ok=%v err=%v body=%q", ok, err, msg.Body)
	}
}

func TestFreePortIsBelowEphemeralRange(t *testing.T) {
	for range 20 {
		if p := FreePort(t); p < 20000 || p >= 32768 {
			t.Fatalf("FreePort = %d", p)
		}
	}
}

// openChannel dials url and returns a channel in confirm mode, closed with the test.
func openChannel(t *testing.T, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return ch
}

// publishConfirmed publishes one persistent message to queue and waits for the broker's ack.
func publishConfirmed(t *testing.T, ch *amqp.Channel, queue, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if acked, err := dc.WaitContext(ctx); err != nil || !acked {
		t.Fatalf("publish confirm: acked=%v err=%v", acked, err)
	}
}

func TestRedisClusterPromotesTheReplicaOfAKilledMaster(t *testing.T) {
	c := StartRedisCluster(t)
	cl := c.Client()
	defer cl.Close()
	ctx := context.Background()
	if err := cl.Set(ctx, "{a}k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	replica := c.ReplicaOf(t, "{a}k")
	killed := c.KillMasterOf(t, "{a}k")
	if now := c.MasterOf(t, "{a}k"); now != replica || now == killed {
		t.Fatalf("after killing %s the master of {a} is %s, want its replica %s", killed, now, replica)
	}
	// The client learns of the new master when it reloads its slot map.
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := cl.Get(ctx, "{a}k").Result()
		if err == nil && v == "v" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET after the failover: %q, %v", v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
