package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/mercamap/relay/internal/destination"
)

// bareRestart is the yardstick of the API rows' restart: what any writer must do to
// reach n destinations it holds no session for, as the contract has the relay do it,
// and nothing of the relay. For each destination: the probe (AssumeRole with a fresh
// wrong ExternalId under the deny-all policy, which the sandbox STS must refuse), the
// session (its own ExternalId, the one-write session policy) and one PutEvents signed
// with it; fanOutConns writers at once, sharing one STS and one EventBridge client
// (retries off), as the relay's. Timed from the first call to the bus's last answer.
func (e *benchEnv) bareRestart(ctx context.Context, n int) (time.Duration, error) {
	conns := min(n, fanOutConns)
	pool := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxConnsPerHost, t.MaxIdleConnsPerHost, t.MaxIdleConns = conns, conns, conns
	})
	defer pool.GetTransport().CloseIdleConnections()
	ours := sts.New(sts.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.stsURL), HTTPClient: pool, Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDBENCH", "bench-not-a-secret", "")})
	eb := eventbridge.New(eventbridge.Options{Region: "us-east-1", BaseEndpoint: aws.String(e.bus.url), HTTPClient: pool, Retryer: aws.NopRetryer{}})
	dests := make([]destination.Destination, n)
	for i := range dests {
		dests[i] = destination.Destination{ID: fmt.Sprintf("bare-restart-%d", i), Account: "acct_bench", Connector: destination.EventBridge,
			BusARN:     fmt.Sprintf("arn:aws:events:us-east-1:111122223333:event-bus/bench-bare-restart-%d", i),
			RoleARN:    fmt.Sprintf("arn:aws:iam::111122223333:role/bench-bare-restart-%d", i),
			ExternalID: destination.NewExternalID()}
		e.sts.RequireExternalID(dests[i].RoleARN, dests[i].ExternalID)
	}
	ev := sizedEvent("bench.bare", e.key, 0, 1024)
	detail := bareDetail("d0", ev.key, ev.msg)
	base := e.bus.count()
	start := time.Now()
	err := writers(ctx, n, func(_, i int) error {
		d := dests[i]
		_, err := ours.AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(d.RoleARN), RoleSessionName: aws.String("mercamap-acct_bench"),
			ExternalId: aws.String(destination.NewExternalID()), Policy: aws.String(destination.DenyAllPolicy()), DurationSeconds: aws.Int32(900)})
		var apiErr smithy.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "AccessDenied" {
			return fmt.Errorf("probe of %s: want AccessDenied, got %v", d.RoleARN, err)
		}
		out, err := ours.AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(d.RoleARN), RoleSessionName: aws.String("mercamap-acct_bench"),
			ExternalId: aws.String(d.ExternalID), Policy: aws.String(destination.SessionPolicy(d)), DurationSeconds: aws.Int32(900)})
		if err != nil {
			return fmt.Errorf("session of %s: %w", d.RoleARN, err)
		}
		c := out.Credentials
		_, err = eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
			EventBusName: aws.String(d.BusARN), Source: aws.String("com.bench.bare"), DetailType: aws.String(ev.key),
			Detail: aws.String(detail), Time: aws.Time(time.Now())}}}, func(o *eventbridge.Options) {
			o.Credentials = credentials.NewStaticCredentialsProvider(aws.ToString(c.AccessKeyId), aws.ToString(c.SecretAccessKey), aws.ToString(c.SessionToken))
		})
		if err != nil {
			return fmt.Errorf("PutEvents to %s: %w", d.BusARN, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if !waitCount(ctx, e.bus, base, n, 30*time.Second) {
		return 0, fmt.Errorf("%d of %d writes on the bus, then none for 30 s", e.bus.count()-base, n)
	}
	return time.Since(start), nil
}
