package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/mercamap/relay/internal/awstest"
)

// options are the command line.
type options struct {
	sts, events, kinesis, admin string // listen addresses, loopback only
	iam                         string // listen address of IAM (iam.go)
	iamAccount                  string // the customer's AWS account, where IAM makes roles
	pubsubPort                  int
	kinesalite                  string // upstream endpoint; "" serves no Kinesis
	latency                     string // --latency, read into buses by run
	buses                       busLatency
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.sts, "sts", "127.0.0.1:24580", "listen address of STS (the relay's aws.endpoints.sts)")
	fs.StringVar(&o.events, "events", "127.0.0.1:24581", "listen address of EventBridge (aws.endpoints.events)")
	fs.IntVar(&o.pubsubPort, "pubsub-port", 24582, "port of Pub/Sub (pstest, plain gRPC) on 127.0.0.1 (gcp.pubsub_endpoint); 0 picks one")
	fs.StringVar(&o.admin, "admin", "127.0.0.1:24583", "listen address of the admin API")
	fs.StringVar(&o.iam, "iam", "127.0.0.1:0", "listen address of IAM (CreateRole, PutRolePolicy…: what `sandbox aws iam` and the AWS CLI call); port 0 picks one, printed on start (the demo's: 127.0.0.1:24586)")
	fs.StringVar(&o.iamAccount, "iam-account", "111122223333", "the customer's AWS account: IAM makes its roles there (arn:aws:iam::ACCOUNT:role/NAME)")
	fs.StringVar(&o.kinesis, "kinesis", "127.0.0.1:24585", "listen address of the Kinesis front (aws.endpoints.kinesis); used with --kinesalite")
	fs.StringVar(&o.kinesalite, "kinesalite", getenv("SANDBOX_KINESALITE"),
		"endpoint of a running kinesalite, http://127.0.0.1:PORT (default $SANDBOX_KINESALITE); empty: no Kinesis")
	fs.StringVar(&o.latency, "latency", getenv("SANDBOX_LATENCY"),
		"how late the buses answer, as one in another region would (default $SANDBOX_LATENCY): 100ms for every bus, or eventbridge=100ms,kinesis=20ms,pubsub=250ms; a bus not named answers at once (a delay proxy in front of each late bus; STS and the admin API never late)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: sandbox [flags]\n\nLocal STS, EventBridge, Pub/Sub and a Kinesis front on 127.0.0.1, with an admin API:\n"+
			"POST /trust, POST /topics, POST /streams, GET /arrived; and IAM (CreateRole, PutRolePolicy), enforced by STS\n"+
			"and the buses. Stops on SIGINT or SIGTERM.\n\n"+
			"       sandbox aws iam create-role|put-role-policy|… [--flag value]…\n\n"+
			"The AWS CLI's IAM commands, sent to the sandbox's IAM (sandbox aws help).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (see --help)", fs.Args())
	}
	if err := o.check(); err != nil {
		return err
	}
	var err error
	if o.buses, err = parseLatency(o.latency); err != nil {
		return err
	}
	if _, ok := o.buses[busKinesis]; ok && o.kinesalite == "" && strings.Contains(strings.ToLower(o.latency), busKinesis) {
		return fmt.Errorf("--latency %q: Kinesis is served only with --kinesalite", o.latency)
	}
	return serve(ctx, o, &lockedWriter{w: stdout})
}

// check keeps every address on loopback: the sandbox never listens or calls elsewhere.
func (o options) check() error {
	addrs := [][2]string{{"sts", o.sts}, {"events", o.events}, {"admin", o.admin}, {"iam", o.iam}}
	if o.kinesalite != "" {
		addrs = append(addrs, [2]string{"kinesis", o.kinesis})
		u, err := url.Parse(o.kinesalite)
		if err != nil || u.Scheme != "http" || !isLoopback(u.Hostname()) || u.Port() == "" {
			return fmt.Errorf("--kinesalite %q: want http://127.0.0.1:PORT", o.kinesalite)
		}
	}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a[1])
		if err != nil || !isLoopback(host) {
			return fmt.Errorf("--%s %q: want a loopback address and port, like 127.0.0.1:24580", a[0], a[1])
		}
	}
	if !regexp.MustCompile(`^\d{12}$`).MatchString(o.iamAccount) {
		return fmt.Errorf("--iam-account %q: want an AWS account id, 12 digits", o.iamAccount)
	}
	if o.pubsubPort < 0 || o.pubsubPort > 65535 {
		return fmt.Errorf("--pubsub-port %d: not a port", o.pubsubPort)
	}
	return nil
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

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

// kinesisFront passes every call to kinesalite, but takes PutRecord(s) only when signed
// with a live session the sandbox's STS handed out, as AWS would for a customer's stream.
//
// kinesalite dies (an unhandled "aborted" error) when a client goes away in the middle
// of a call. So the front reads the whole request first, and finishes every call it
// starts with kinesalite, reading the whole answer, even when its own client has gone:
// a relay killed or a network path cut mid-call must not take kinesalite down with it.
func (s *sandbox) kinesisFront(upstream *url.URL) http.Handler {
	client := &http.Client{Timeout: 30 * time.Second}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return // the client went away before its request was whole: kinesalite never sees it
		}
		switch target := r.Header.Get("X-Amz-Target"); target {
		case "Kinesis_20131202.PutRecord", "Kinesis_20131202.PutRecords":
			action := "kinesis:" + strings.TrimPrefix(target, "Kinesis_20131202.")
			if f, ok := s.sts.Authorize(r, action, s.streamARN(body)); !ok {
				w.Header().Set("Content-Type", "application/x-amz-json-1.1")
				w.Header().Set("X-Amzn-ErrorType", f.Code)
				w.WriteHeader(f.Status)
				json.NewEncoder(w).Encode(map[string]string{"__type": f.Code, "message": f.Message})
				return
			}
		}
		target := *upstream
		target.Path, target.RawQuery = r.URL.Path, r.URL.RawQuery
		req, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, target.String(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		req.Header.Del("Connection")
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, "kinesalite: "+err.Error(), http.StatusBadGateway)
			return
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			http.Error(w, "kinesalite: "+err.Error(), http.StatusBadGateway)
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(answer)
	})
}

// streamARN is the stream a Kinesis call names: its StreamARN, else its StreamName in
// the customer's account (--iam-account) and us-east-1.
func (s *sandbox) streamARN(body []byte) string {
	var in struct{ StreamARN, StreamName string }
	json.Unmarshal(body, &in)
	if in.StreamARN != "" {
		return in.StreamARN
	}
	return "arn:aws:kinesis:us-east-1:" + s.iam.account + ":stream/" + in.StreamName
}

// The admin API.

type apiError struct {
	status    int
	code, msg string
}

func (e *apiError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf(format, args...)}
}

func (s *sandbox) adminHandler() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, f func(r *http.Request) (any, error)) { mux.HandleFunc(pattern, handler(f)) }
	handle("GET /healthz", func(*http.Request) (any, error) { return map[string]bool{"ok": true}, nil })
	handle("POST /trust", s.trust)
	handle("POST /topics", s.createTopic)
	handle("POST /streams", s.createStream)
	arrivedJSON := handler(func(r *http.Request) (any, error) { return s.arrived(r.Context()) })
	mux.HandleFunc("GET /arrived", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("view") != "text" {
			arrivedJSON(w, r)
			return
		}
		a, err := s.arrived(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		a.writeText(w)
	})
	return mux
}

// handler answers f's value as indented JSON, or its error as {"error":{"code","message"}}.
func handler(f func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := f(r)
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			ae := &apiError{http.StatusBadGateway, "UPSTREAM", err.Error()}
			errors.As(err, &ae)
			w.WriteHeader(ae.status)
			v = map[string]any{"error": map[string]string{"code": ae.code, "message": ae.msg}}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(v)
	}
}

func decode(r *http.Request, v any) error {
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v); err != nil {
		return invalid("the body is not the JSON expected: %v", err)
	}
	return nil
}

// trust is the customer pasting the card's trust policy onto their role: our principal
// may assume it with exactly this ExternalId, and nothing else may.
func (s *sandbox) trust(r *http.Request) (any, error) {
	var in struct {
		RoleARN    string `json:"role_arn"`
		ExternalID string `json:"external_id"`
	}
	if err := decode(r, &in); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(in.RoleARN, "arn:aws:iam::") || !strings.Contains(in.RoleARN, ":role/") {
		return nil, invalid("role_arn %q: want arn:aws:iam::ACCOUNT:role/NAME", in.RoleARN)
	}
	if in.ExternalID == "" {
		return nil, invalid("external_id is required: the card shows it")
	}
	s.sts.RequireExternalID(in.RoleARN, in.ExternalID)
	s.out.printf("trust: %s now trusts callers presenting ExternalId %s", in.RoleARN, in.ExternalID)
	return map[string]any{"role_arn": in.RoleARN, "external_id": in.ExternalID, "trusted": true}, nil
}

// createTopic makes projects/P/topics/T with the labels (or sets them on an existing one),
// and the sandbox's own subscription on it, which /arrived pulls.
func (s *sandbox) createTopic(r *http.Request) (any, error) {
	var in struct {
		Project string            `json:"project"`
		Topic   string            `json:"topic"`
		Labels  map[string]string `json:"labels"`
	}
	if err := decode(r, &in); err != nil {
		return nil, err
	}
	if in.Project == "" || in.Topic == "" || strings.Contains(in.Project+in.Topic, "/") {
		return nil, invalid("project and topic are required, without slashes")
	}
	ctx := r.Context()
	name := "projects/" + in.Project + "/topics/" + in.Topic
	topic, err := s.topics.CreateTopic(ctx, &pubsubpb.Topic{Name: name, Labels: in.Labels})
	if status.Code(err) == codes.AlreadyExists {
		topic, err = s.topics.UpdateTopic(ctx, &pubsubpb.UpdateTopicRequest{
			Topic:      &pubsubpb.Topic{Name: name, Labels: in.Labels},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
		})
	}
	if err != nil {
		return nil, fmt.Errorf("topic %s: %w", name, err)
	}
	sub := "projects/" + in.Project + "/subscriptions/" + in.Topic + "-sandbox"
	_, err = s.subs.CreateSubscription(ctx, &pubsubpb.Subscription{Name: sub, Topic: name, AckDeadlineSeconds: 60})
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return nil, fmt.Errorf("subscription %s: %w", sub, err)
	}
	s.mu.Lock()
	if _, ok := s.subTopic[sub]; !ok {
		s.subscriptions = append(s.subscriptions, sub)
		s.subTopic[sub] = name
	}
	s.mu.Unlock()
	s.out.printf("pubsub: topic %s, labels %v, read through %s", name, topic.GetLabels(), sub)
	return map[string]any{"topic": name, "labels": topic.GetLabels(), "subscription": sub}, nil
}

// createStream makes a one-shard stream in kinesalite (one shard: one order to read back)
// and answers once it is ACTIVE.
func (s *sandbox) createStream(r *http.Request) (any, error) {
	var in struct {
		Name string `json:"name"`
	}
	if err := decode(r, &in); err != nil {
		return nil, err
	}
	if in.Name == "" {
		return nil, invalid("name is required")
	}
	if s.kin == nil {
		return nil, &apiError{http.StatusServiceUnavailable, "UNAVAILABLE", "the sandbox runs without Kinesis: start it with --kinesalite"}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	_, err := s.kin.CreateStream(ctx, &kinesis.CreateStreamInput{StreamName: aws.String(in.Name), ShardCount: aws.Int32(1)})
	var inUse *ktypes.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return nil, fmt.Errorf("create stream %s: %w", in.Name, err)
	}
	for {
		out, err := s.kin.DescribeStream(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(in.Name)})
		if err == nil && out.StreamDescription.StreamStatus == ktypes.StreamStatusActive {
			s.mu.Lock()
			if !slices.Contains(s.streams, in.Name) {
				s.streams = append(s.streams, in.Name)
			}
			s.mu.Unlock()
			s.out.printf("kinesis: stream %s ACTIVE", in.Name)
			return map[string]any{"stream": in.Name, "arn": aws.ToString(out.StreamDescription.StreamARN), "status": "ACTIVE"}, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stream %s not ACTIVE in time (last error: %v)", in.Name, err)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// What /arrived answers.
type (
	arrivedBody struct {
		EventBridge []eventBridgeEntry `json:"eventbridge"`
		Kinesis     []kinesisRecord    `json:"kinesis"`
		PubSub      []pubsubMessage    `json:"pubsub"`
	}
	eventBridgeEntry struct {
		Bus        string          `json:"bus"`
		Source     string          `json:"source"`
		DetailType string          `json:"detail_type"`
		Time       time.Time       `json:"time,omitzero"`
		Detail     json.RawMessage `json:"detail"`
	}
	kinesisRecord struct {
		Stream         string          `json:"stream"`
		PartitionKey   string          `json:"partition_key"`
		SequenceNumber string          `json:"sequence_number"`
		Data           json.RawMessage `json:"data"`
	}
	pubsubMessage struct {
		Topic      string            `json:"topic"`
		MessageID  string            `json:"message_id"`
		Attributes map[string]string `json:"attributes"`
		Data       json.RawMessage   `json:"data"`
	}
)

// arrived reads everything each bus took so far, in order: EventBridge's entries, every
// created stream from TRIM_HORIZON, and what the topics' subscriptions have delivered.
func (s *sandbox) arrived(ctx context.Context) (*arrivedBody, error) {
	body := &arrivedBody{EventBridge: []eventBridgeEntry{}, Kinesis: []kinesisRecord{}}
	for _, e := range s.events.Entries() {
		body.EventBridge = append(body.EventBridge, eventBridgeEntry{
			Bus: e.EventBusName, Source: e.Source, DetailType: e.DetailType, Time: e.Time, Detail: asJSON([]byte(e.Detail))})
	}
	s.mu.Lock()
	streams := slices.Clone(s.streams)
	s.mu.Unlock()
	for _, name := range streams {
		recs, err := s.readStream(ctx, name)
		if err != nil {
			return nil, err
		}
		body.Kinesis = append(body.Kinesis, recs...)
	}
	var err error
	if body.PubSub, err = s.pull(ctx); err != nil {
		return nil, err
	}
	return body, nil
}

// writeText is /arrived?view=text: one line per event each bus took, for people.
func (a *arrivedBody) writeText(w io.Writer) {
	type body struct {
		Type    string `json:"type"`
		EventID string `json:"event_id"`
		Data    struct {
			Metadata map[string]any `json:"metadata"`
		} `json:"data"`
	}
	read := func(raw json.RawMessage) (b body) {
		json.Unmarshal(raw, &b)
		return b
	}
	fmt.Fprintf(w, "EventBridge: %d entries\n", len(a.EventBridge))
	for i, e := range a.EventBridge {
		b := read(e.Detail)
		store := "-"
		for _, k := range []string{"store_id", "storeId"} {
			if v, ok := b.Data.Metadata[k].(string); ok {
				store = v
				break
			}
		}
		fmt.Fprintf(w, "  %3d  bus %-8s  %-13s  %-14s  store %-10s  %s\n", i+1, e.Bus[strings.LastIndex(e.Bus, "/")+1:],
			e.Source, e.DetailType, store, b.EventID)
	}
	fmt.Fprintf(w, "Kinesis: %d records\n", len(a.Kinesis))
	for i, r := range a.Kinesis {
		b := read(r.Data) // flattened: type and event_id stay at the top
		fmt.Fprintf(w, "  %3d  stream %-8s  %-14s  key %-12s  %s\n", i+1, r.Stream, b.Type, r.PartitionKey, b.EventID)
	}
	fmt.Fprintf(w, "Pub/Sub: %d messages\n", len(a.PubSub))
	for i, m := range a.PubSub {
		store := m.Attributes["store_id"]
		if store == "" {
			store = "-"
		}
		fmt.Fprintf(w, "  %3d  topic %-12s  %-14s  store_id %-10s  %s\n", i+1, m.Topic[strings.LastIndex(m.Topic, "/")+1:],
			m.Attributes["event_type"], store, m.Attributes["event_id"])
	}
}

func (s *sandbox) readStream(ctx context.Context, name string) ([]kinesisRecord, error) {
	desc, err := s.kin.DescribeStream(ctx, &kinesis.DescribeStreamInput{StreamName: aws.String(name)})
	if err != nil {
		return nil, fmt.Errorf("describe stream %s: %w", name, err)
	}
	var recs []kinesisRecord
	for _, sh := range desc.StreamDescription.Shards {
		it, err := s.kin.GetShardIterator(ctx, &kinesis.GetShardIteratorInput{StreamName: aws.String(name),
			ShardId: sh.ShardId, ShardIteratorType: ktypes.ShardIteratorTypeTrimHorizon})
		if err != nil {
			return nil, fmt.Errorf("read stream %s: %w", name, err)
		}
		iter := it.ShardIterator
		for range 1000 { // a bound: 10 000 records a page at most
			out, err := s.kin.GetRecords(ctx, &kinesis.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				return nil, fmt.Errorf("read stream %s: %w", name, err)
			}
			for _, rec := range out.Records {
				recs = append(recs, kinesisRecord{Stream: name, PartitionKey: aws.ToString(rec.PartitionKey),
					SequenceNumber: aws.ToString(rec.SequenceNumber), Data: asJSON(rec.Data)})
			}
			iter = out.NextShardIterator
			if iter == nil || len(out.Records) == 0 && aws.ToInt64(out.MillisBehindLatest) == 0 {
				break
			}
		}
	}
	return recs, nil
}

// pull takes what is waiting on the sandbox's subscriptions, acks it and keeps it.
func (s *sandbox) pull(ctx context.Context) ([]pubsubMessage, error) {
	s.pullMu.Lock()
	defer s.pullMu.Unlock()
	s.mu.Lock()
	subs := slices.Clone(s.subscriptions)
	topics := make([]string, len(subs))
	for i, sub := range subs {
		topics[i] = s.subTopic[sub]
	}
	s.mu.Unlock()
	var got []pubsubMessage
	for i, sub := range subs {
		for {
			resp, err := s.subs.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1000,
				ReturnImmediately: true}) //nolint:staticcheck // pstest honours it; the alternative waits 500 ms
			if err != nil {
				return nil, fmt.Errorf("pull %s: %w", sub, err)
			}
			if len(resp.ReceivedMessages) == 0 {
				break
			}
			ack := make([]string, 0, len(resp.ReceivedMessages))
			for _, m := range resp.ReceivedMessages {
				ack = append(ack, m.AckId)
				got = append(got, pubsubMessage{Topic: topics[i], MessageID: m.Message.MessageId,
					Attributes: m.Message.Attributes, Data: asJSON(m.Message.Data)})
			}
			if err := s.subs.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: ack}); err != nil {
				return nil, fmt.Errorf("ack %s: %w", sub, err)
			}
		}
	}
	// pstest hands messages out in no particular order; its ids ("m0", "m1", …) count
	// publishes, so they give the order the topic took them in.
	slices.SortStableFunc(got, func(a, b pubsubMessage) int { return messageNumber(a.MessageID) - messageNumber(b.MessageID) })
	s.pulled = append(s.pulled, got...)
	return append([]pubsubMessage{}, s.pulled...), nil
}

func messageNumber(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "m"))
	return n
}

// asJSON keeps a JSON payload as it is and quotes anything else as a string.
func asJSON(b []byte) json.RawMessage {
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	q, _ := json.Marshal(string(b))
	return q
}
