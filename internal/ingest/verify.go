package ingest

import (
	"errors"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/cloudevent"
	"github.com/mercamap/relay/internal/signature"
	"github.com/mercamap/relay/internal/store"
)

// TenantMismatch is the quarantine reason for a ce-tenantid that differs from the signed
// X-Tenant-ID: routing follows the tenant, so it must be the one the signature covers.
const TenantMismatch = "tenant_mismatch"

// EventIDMismatch is the quarantine reason for a ce-id that is not the one the signed
// body and routing key name: ce-id is the dedup key, and headers are not signed.
const EventIDMismatch = "event_id_mismatch"

// rejection says why a message is quarantined; the reason goes into x-relay-reason.
type rejection struct {
	reason string
	detail string
}

// check verifies one delivery: the signature first (authenticity), then the envelope.
// It returns the log entry and the signed tenant, or why the message is refused.
func (c *Consumer) check(d amqp.Delivery) (store.Entry, string, *rejection) {
	h := map[string]any(d.Headers)
	get := func(name string) string { v, _ := cloudevent.Header(h, name); return v }
	tenant := get(TenantHeader)
	signed, err := c.opts.Verifier.VerifyBody(signature.Message{
		Signature:  get("x-message-signature"),
		Timestamp:  get("t"),
		Version:    get("signature-version"),
		Tenant:     tenant,
		Exchange:   d.Exchange,
		RoutingKey: d.RoutingKey,
		Body:       d.Body,
	})
	var sigErr *signature.Error
	if errors.As(err, &sigErr) {
		return store.Entry{}, "", &rejection{string(sigErr.Reason), sigErr.Detail}
	} else if err != nil {
		return store.Entry{}, "", &rejection{string(signature.BadSignature), err.Error()}
	}
	// The verifier validated the body and read its jobId: one JSON pass serves every check below.
	ev, err := cloudevent.FromAMQPChecked(h, d.Body, signed.BodyJSON)
	var ceErr *cloudevent.Error
	if errors.As(err, &ceErr) {
		return store.Entry{}, "", &rejection{string(ceErr.Reason), ceErr.Detail}
	} else if err != nil {
		return store.Entry{}, "", &rejection{string(cloudevent.NotACloudEvent), err.Error()}
	}
	if ceTenant, ok := cloudevent.Attribute(h, "tenantid"); ok && ceTenant != tenant {
		return store.Entry{}, "", &rejection{TenantMismatch, "ce-tenantid differs from the signed X-Tenant-ID"}
	}
	if jobID := signed.JobID; jobID != "" && strings.HasPrefix(d.RoutingKey, "job.") {
		if want := "fetcher." + d.RoutingKey + "." + jobID; ev.ID != want {
			return store.Entry{}, "", &rejection{EventIDMismatch, "ce-id is not " + want + ", the id the signed body and routing key name"}
		}
	}
	return store.Entry{
		EventID:       ev.ID,
		Type:          d.RoutingKey, // the short type: the routing key the signature covers
		CEType:        ev.Type,
		Source:        ev.Source,
		Time:          ev.Time,
		Tenant:        tenant,
		Subject:       ev.Subject,
		SchemaVersion: ev.SchemaVersion,
		Data:          ev.Data,
	}, tenant, nil
}
