package main

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/mercamap/relay/internal/benchkit"
	amqp "github.com/rabbitmq/amqp091-go"
)

// barePipeline is the relay's path without the relay, on the same broker and bus: a plain
// amqp091-go consumer of a quorum queue that puts each delivery on the bus with one
// PutEvents, one in flight as for one ordered destination, and then acks it. Its
// publish-to-bus latency at a row's rate and size is the floor the relay's is read against.
// It runs r.repeats times on one consumer, after a warm-up.
func barePipeline(ctx context.Context, r benchRun, idx int, amqpURL string, key []byte, bus *remoteBus, rabbitPID int) []*bareResult {
	var out []*bareResult
	fail := func(format string, args ...any) []*bareResult {
		return append(out, &bareResult{err: fmt.Sprintf(format, args...)})
	}
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return fail("connect: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fail("channel: %v", err)
	}
	name := fmt.Sprintf("bench.bare.%d.%d", idx, time.Now().Unix())
	if err := ch.ExchangeDeclare(name, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fail("declare exchange: %v", err)
	}
	defer ch.ExchangeDelete(name, false, false)
	quorum := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	if _, err := ch.QueueDeclare(name, true, false, false, false, quorum); err != nil {
		return fail("declare queue: %v", err)
	}
	defer ch.QueueDelete(name, false, false, false)
	if err := ch.QueueBind(name, "job.#", name, false, nil); err != nil {
		return fail("bind: %v", err)
	}
	if err := ch.Qos(256, 0, false); err != nil {
		return fail("qos: %v", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, name, "", false, false, false, false, nil)
	if err != nil {
		return fail("consume: %v", err)
	}
	busARN := bareBusARN(idx)
	eb := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String(bus.url),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDBARE", "bare", "")})
	putErr := make(chan error, 1)
	go func() {
		for d := range deliveries {
			id, _ := d.Headers["ce-id"].([]byte)
			detail := bareDetail(string(id), d.Body)
			_, err := eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
				EventBusName: aws.String(busARN), Source: aws.String("com.bench.bare"),
				DetailType: aws.String(d.RoutingKey), Detail: aws.String(detail)}}})
			if err != nil {
				putErr <- err
				return
			}
			_ = d.Ack(false)
		}
	}()

	pub := &publisher{urls: []string{amqpURL}, exchange: name}
	defer pub.close()
	warm := make([]*event, 20)
	for i := range warm {
		warm[i] = sizedEvent(name, key, i, r.size)
	}
	base := bus.count()
	pub.send(ctx, warm)
	if !waitCount(ctx, bus, base, len(warm), 30*time.Second) {
		return fail("warm-up: %d of %d on the bus, then none for 30 s", bus.count()-base, len(warm))
	}
	for k := range r.repeats {
		evs := make([]*event, r.events)
		for i := range evs {
			evs[i] = sizedEvent(name, key, len(warm)+k*r.events+i, r.size)
		}
		base = bus.count()
		cpu0, bus0, rabbit0 := benchkit.SelfCPU(), procCPU(bus.pid()), procCPU(rabbitPID)
		start := time.Now()
		publishAt(ctx, pub, evs, r.rate)
		if !waitCount(ctx, bus, base, len(evs), 120*time.Second) {
			select {
			case err := <-putErr:
				return fail("PutEvents: %v", err)
			default:
			}
			return fail("%d of %d on the bus, then none for 120 s", bus.count()-base, len(evs))
		}
		res := &bareResult{loadCPU: benchkit.SelfCPU() - cpu0, busCPU: procCPU(bus.pid()) - bus0, rabbitCPU: procCPU(rabbitPID) - rabbit0}
		var last time.Time
		if res.lat, last, err = bus.latencies(evs, busARN); err != nil {
			return fail("%v", err)
		}
		res.perSec = float64(len(evs)) / last.Sub(start).Seconds()
		out = append(out, res)
	}
	return out
}
