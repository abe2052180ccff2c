package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mercamap/relay/internal/awstest"
)

// The sandbox itself: serve starts the fake clouds (STS, EventBridge, the Kinesis front,
// IAM and the admin API on HTTP listeners, Pub/Sub on pstest), each late bus behind its
// --latency proxy (latency.go), prints where each one listens, and shuts them down when
// the context ends or a server fails.

// lockedWriter serializes the lines the handlers print.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "sandbox: "+format+"\n", args...)
}

// sandbox holds the fake clouds and what the admin API needs to reach them.
type sandbox struct {
	out    *lockedWriter
	sts    *awstest.STS
	events *awstest.EventBridge
	ps     *pstest.Server
	topics *vkit.TopicAdminClient
	subs   *vkit.SubscriptionAdminClient
	kin    *kinesis.Client // nil without kinesalite
	iam    *iamService

	mu            sync.Mutex
	subscriptions []string // the sandbox's own, one per topic, in creation order
	subTopic      map[string]string
	streams       []string

	pullMu sync.Mutex // one /arrived reads at a time, so pulled keeps the order
	pulled []pubsubMessage
}

func serve(ctx context.Context, o options, out *lockedWriter) (err error) {
	s := &sandbox{out: out, sts: awstest.NewSTSHandler(), events: awstest.NewEventBridgeHandler(), subTopic: map[string]string{}}
	s.events.RequireSessionFrom(s.sts)
	s.iam = newIAM(o.iamAccount, s.sts, out)

	type server struct {
		name string
		ln   net.Listener
		at   string // the address clients are told: a delay proxy's when the bus answers late
		srv  *http.Server
	}
	var servers []server
	defer func() {
		for _, sv := range servers {
			sv.ln.Close()
		}
	}()
	var late fronts // --latency's proxies, closed before the servers' listeners
	defer late.close()
	bus := map[string]string{"events": busEventBridge, "kinesis": busKinesis} // the others are never late
	listen := func(name, addr string, h http.Handler) error {
		ln, at, err := late.listen(o.buses, bus[name], addr)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		servers = append(servers, server{name, ln, at, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}})
		return nil
	}
	if err := listen("sts", o.sts, s.sts); err != nil {
		return err
	}
	if err := listen("events", o.events, s.events); err != nil {
		return err
	}
	if o.kinesalite != "" {
		upstream, _ := url.Parse(o.kinesalite) // checked
		s.kin = kinesis.New(kinesis.Options{
			Region:       "us-east-1",
			BaseEndpoint: aws.String(o.kinesalite),
			Credentials:  credentials.NewStaticCredentialsProvider("AKIDSANDBOX", "sandbox-secret", ""),
		})
		if err := listen("kinesis", o.kinesis, s.kinesisFront(upstream)); err != nil {
			return err
		}
	}
	if err := listen("admin", o.admin, s.adminHandler()); err != nil {
		return err
	}
	if err := listen("iam", o.iam, s.iam); err != nil {
		return err
	}

	psPort := o.pubsubPort
	if o.buses[busPubSub] > 0 {
		psPort = 0 // the proxy takes --pubsub-port
	}
	if s.ps, err = startPubSub(psPort); err != nil {
		return err
	}
	defer s.ps.Close()
	psAt := s.ps.Addr // the sandbox's own clients call pstest directly, never late
	if d := o.buses[busPubSub]; d > 0 {
		if psAt, err = late.front(busPubSub, net.JoinHostPort("127.0.0.1", strconv.Itoa(o.pubsubPort)), s.ps.Addr, d); err != nil {
			return err
		}
	}
	conn := []option.ClientOption{
		option.WithEndpoint(s.ps.Addr), option.WithoutAuthentication(), option.WithTelemetryDisabled(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
	if s.topics, err = vkit.NewTopicAdminClient(ctx, conn...); err != nil {
		return fmt.Errorf("pubsub admin client: %w", err)
	}
	defer s.topics.Close()
	if s.subs, err = vkit.NewSubscriptionAdminClient(ctx, conn...); err != nil {
		return fmt.Errorf("pubsub subscription client: %w", err)
	}
	defer s.subs.Close()

	errs := make(chan error, len(servers))
	for _, sv := range servers {
		go func() {
			if err := sv.srv.Serve(sv.ln); !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("%s: %w", sv.name, err)
			}
		}()
	}
	addr := map[string]string{}
	for _, sv := range servers {
		addr[sv.name] = sv.at
	}
	out.printf("STS          http://%s   AssumeRole; a role trusts nobody until IAM CreateRole or POST /trust", addr["sts"])
	out.printf("EventBridge  http://%s   PutEvents, signed with a live STS session%s", addr["events"], o.buses.note(busEventBridge))
	out.printf("Pub/Sub      %s          pstest, plain gRPC%s", psAt, o.buses.note(busPubSub))
	if s.kin != nil {
		out.printf("Kinesis      http://%s   PutRecord with a live STS session, onto kinesalite at %s%s", addr["kinesis"], o.kinesalite, o.buses.note(busKinesis))
	} else {
		out.printf("Kinesis      none (no --kinesalite)")
	}
	out.printf("IAM          http://%s   CreateRole, PutRolePolicy… in account %s (sandbox aws iam …); STS and the buses enforce them", addr["iam"], o.iamAccount)
	out.printf("admin        http://%s   POST /trust /topics /streams, GET /arrived", addr["admin"])
	out.printf("ready")

	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	for _, sv := range servers {
		sv.srv.Shutdown(shutdown)
	}
	out.printf("stopped")
	return err
}

// startPubSub starts pstest on 127.0.0.1:port. pstest panics when it cannot listen.
func startPubSub(port int) (srv *pstest.Server, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pubsub on 127.0.0.1:%d: %v", port, r)
		}
	}()
	return pstest.NewServerWithAddress(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))), nil
}
