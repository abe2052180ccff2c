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
// newBarePipeline sets it up and warms it up; each run is one repetition, run between the
// relay's (the consumer idles meanwhile).
type barePipeline struct {
	r         benchRun
	idx       int
	name      string
	key       []byte
	bus       *remoteBus
	rabbitPID int
	conn      *amqp.Connection
	ch        *amqp.Channel
	pub       *publisher
	putErr    chan error
	sent      int
}

func newBarePipeline(ctx context.Context, r benchRun, idx int, amqpURL string, key []byte, bus *remoteBus, rabbitPID int) (_ *barePipeline, err error) {
	p := &barePipeline{r: r, idx: idx, key: key, bus: bus, rabbitPID: rabbitPID, putErr: make(chan error, 1),
		name: fmt.Sprintf("bench.bare.%d.%d", idx, time.Now().Unix())}
	if p.conn, err = amqp.Dial(amqpURL); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.ch, err = p.conn.Channel(); err != nil {
		return nil, fmt.Errorf("channel: %w", err)
	}
	ch := p.ch
	if err := ch.ExchangeDeclare(p.name, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return nil, fmt.Errorf("declare exchange: %w", err)
	}
	quorum := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	if _, err := ch.QueueDeclare(p.name, true, false, false, false, quorum); err != nil {
		return nil, fmt.Errorf("declare queue: %w", err)
	}
	if err := ch.QueueBind(p.name, "job.#", p.name, false, nil); err != nil {
		return nil, fmt.Errorf("bind: %w", err)
	}
	if err := ch.Qos(256, 0, false); err != nil {
		return nil, fmt.Errorf("qos: %w", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, p.name, "", false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	busARN := bareBusARN(idx)
	eb := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String(bus.url),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDBARE", "bare", "")})
	go func() {
		for d := range deliveries {
			detail := bareDetail("d0", d.RoutingKey, amqp.Publishing{Headers: d.Headers, Body: d.Body})
			_, err := eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
				EventBusName: aws.String(busARN), Source: aws.String("com.bench.bare"),
				DetailType: aws.String(d.RoutingKey), Detail: aws.String(detail)}}})
			if err != nil {
				p.putErr <- err
				return
			}
			_ = d.Ack(false)
		}
	}()

	p.pub = &publisher{urls: []string{amqpURL}, exchange: p.name}
	warm := make([]*event, 20)
	for i := range warm {
		warm[i] = sizedEvent(p.name, key, i, r.size)
	}
	p.sent = len(warm)
	base := bus.count()
	p.pub.send(ctx, warm)
	if !waitCount(ctx, bus, base, len(warm), 30*time.Second) {
		return nil, fmt.Errorf("warm-up: %d of %d on the bus, then none for 30 s", bus.count()-base, len(warm))
	}
	return p, nil
}

// run is one repetition: the row's events published at its rate until the bus holds
// them all, and what this process (publisher and consumer), the bus and the broker spent.
func (p *barePipeline) run(ctx context.Context) *bareResult {
	evs := make([]*event, p.r.events)
	for i := range evs {
		evs[i] = sizedEvent(p.name, p.key, p.sent+i, p.r.size)
	}
	p.sent += len(evs)
	base := p.bus.count()
	cpu0, bus0, rabbit0 := benchkit.SelfCPU(), procCPU(p.bus.pid()), procCPU(p.rabbitPID)
	start := time.Now()
	publishAt(ctx, p.pub, evs, p.r.rate)
	if !waitCount(ctx, p.bus, base, len(evs), 120*time.Second) {
		select {
		case err := <-p.putErr:
			return &bareResult{err: fmt.Sprintf("PutEvents: %v", err)}
		default:
		}
		return &bareResult{err: fmt.Sprintf("%d of %d on the bus, then none for 120 s", p.bus.count()-base, len(evs))}
	}
	res := &bareResult{loadCPU: benchkit.SelfCPU() - cpu0, busCPU: procCPU(p.bus.pid()) - bus0, rabbitCPU: procCPU(p.rabbitPID) - rabbit0}
	var last time.Time
	var err error
	if res.lat, last, err = p.bus.latencies(evs, bareBusARN(p.idx)); err != nil {
		return &bareResult{err: err.Error()}
	}
	res.perSec = float64(len(evs)) / last.Sub(start).Seconds()
	return res
}

func (p *barePipeline) close() {
	if p.pub != nil {
		p.pub.close()
	}
	if p.ch != nil {
		p.ch.QueueDelete(p.name, false, false, false)
		p.ch.ExchangeDelete(p.name, false, false)
	}
	if p.conn != nil {
		p.conn.Close()
	}
}
