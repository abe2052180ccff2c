package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	ktypes "github.com/aws/aws-sdk-go-v2/service/kinesis/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
)

// The admin API (JSON): what the customer does in their own cloud, on --admin.
//
//	GET  /healthz
//	POST /trust    a role's trust policy, set without IAM
//	POST /topics   a Pub/Sub topic with labels, and the sandbox's subscription on it
//	POST /streams  a one-shard Kinesis stream, ACTIVE when answered
//	GET  /arrived  what each bus took (arrived.go)

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
