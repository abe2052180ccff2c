package assume_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/tracing"
	"github.com/mercamap/relay/internal/tracing/tracingtest"
)

// Each STS setup is a span: the probe and the session for a role that requires its
// ExternalId end it at "session", issued; a role that lets the probe in ends it at
// "probe", in error with the card's sentence. The spans reach a real OTLP receiver
// through the real exporter.
func TestEachSTSSetupIsASpanEndingWhereTheSetupEnded(t *testing.T) {
	rcv := tracingtest.New(t)
	tr, err := tracing.New(config.Tracing{OTLPEndpoint: rcv.URL}, tracing.Options{Queue: "q", Instance: "relay-0"})
	if err != nil {
		t.Fatal(err)
	}
	sts := awstest.NewSTS(t)
	sts.RequireExternalID(role, extID)
	const loose = "arn:aws:iam::111122223333:role/loose"
	if err := sts.SetTrustPolicy(loose, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"`+
		awstest.CallerARN+`"},"Action":"sts:AssumeRole","Condition":{"StringLike":{"sts:ExternalId":"*"}}}]}`); err != nil {
		t.Fatal(err)
	}
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", "")}
	a := assume.New(assume.Options{STS: assume.NewSTSClient(cfg, sts.URL), IdentityName: "mercamap", PrincipalARN: principal, Tracer: tr})

	good := busDest()
	if err := a.Check(ctx(t), good); err != nil {
		t.Fatalf("check of a trusting role: %v", err)
	}
	bad := busDest()
	bad.ID, bad.RoleARN = "loose-bus", loose
	if err := a.Check(ctx(t), bad); err == nil {
		t.Fatal("a role that lets a wrong ExternalId in passed its check")
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}

	byDest := map[string]*tracepb.Span{}
	for _, s := range rcv.Spans() {
		if strings.HasPrefix(s.GetName(), "relay sts setup") {
			byDest[tracingtest.Attr(s, "relay.destination")] = s
		}
	}
	ok, refused := byDest["orders-bus"], byDest["loose-bus"]
	if ok == nil || refused == nil {
		t.Fatalf("setup spans for %v, want orders-bus and loose-bus", byDest)
	}
	if tracingtest.Attr(ok, "relay.sts.stage") != "session" || ok.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR ||
		tracingtest.Attr(ok, "aws.iam.role_arn") != role || ok.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("the trusting role's setup span: %v, status %v", ok.GetAttributes(), ok.GetStatus())
	}
	if tracingtest.Attr(refused, "relay.sts.stage") != "probe" || refused.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR ||
		!strings.Contains(refused.GetStatus().GetMessage(), "let the relay in with a wrong ExternalId") {
		t.Errorf("the loose role's setup span: %v, status %v; want it ended at the probe with the card's sentence",
			refused.GetAttributes(), refused.GetStatus())
	}
	if got := rcv.Resource(ok)["service.instance.id"]; got != "relay-0" {
		t.Errorf("service.instance.id %q, want relay-0", got)
	}
}
