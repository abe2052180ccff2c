// Package jobevent builds job events exactly as the Fetcher Worker publishes them:
// CloudEvents binary-mode headers as AMQP byte arrays, signed with signature v1. It
// serves `relay publish`, the demo, the drills and the tests; the relay never
// publishes job events itself.
package jobevent

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/signature"
)

// Job is one terminal job to announce.
type Job struct {
	ID      string // job UUID
	Status  string // "completed" or "failed"
	Tenant  string // X-Tenant-ID and ce-tenantid; "single-tenant" when empty
	Source  string // ce-source; "//lerian.fetcher/worker" when empty
	StoreID string // metadata.store_id, when set
	Body    []byte // overrides the generated body when set
}

// RoutingKey is job.<status>.
func (j Job) RoutingKey() string { return "job." + j.Status }

// EventID is the ce-id: stable across re-emits, the relay's dedup key.
func (j Job) EventID() string { return "fetcher.job." + j.Status + "." + j.ID }

// DefaultBody is a body shaped like the Worker's for this job.
func (j Job) DefaultBody(now time.Time) []byte {
	meta := map[string]any{"source": "reporter", "correlationId": "c-" + j.ID}
	if j.StoreID != "" {
		meta["store_id"] = j.StoreID
	}
	body := map[string]any{"jobId": j.ID, "metadata": meta, "status": j.Status}
	if j.Status == "completed" {
		body["result"] = map[string]any{
			"path": "external-data/" + j.ID + ".json", "sizeBytes": 1234, "rowCount": 10, "format": "json",
			"integrity":  map[string]any{"algorithm": "HMAC-SHA256", "signature": "5d41402abc4b2a76b9719d911017c592"},
			"protection": map[string]any{"encrypted": true, "mode": "adapter-managed", "appliedBy": "adapter"},
		}
		body["executionTimeMs"] = 842
		body["completedAt"] = now.UTC().Format(time.RFC3339Nano)
	} else {
		meta["error"] = map[string]any{"message": "dial tcp [redacted]: connect: connection refused"}
	}
	b, _ := json.Marshal(body) // maps of strings and numbers always marshal
	return b
}

// Pad adds metadata.pad to a Worker-shaped body so it is size bytes long, for load
// runs that need a given event size (a body already longer is left as it is).
func Pad(body []byte, size int) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	meta, ok := doc["metadata"].(map[string]any)
	if !ok {
		return nil, errors.New("body has no metadata object")
	}
	meta["pad"] = ""
	out, err := json.Marshal(doc)
	if err != nil || len(out) >= size {
		return out, err
	}
	meta["pad"] = strings.Repeat("x", size-len(out))
	return json.Marshal(doc)
}

// Build returns the signed message the Worker would publish for j on exchange at now.
// A re-emit is Build again later: same ce-id and body, new ce-time and t.
func Build(j Job, exchange string, key []byte, now time.Time) amqp.Publishing {
	if j.Tenant == "" {
		j.Tenant = "single-tenant"
	}
	if j.Source == "" {
		j.Source = "//lerian.fetcher/worker"
	}
	body := j.Body
	if body == nil {
		body = j.DefaultBody(now)
	}
	t := strconv.FormatInt(now.Unix(), 10)
	payload := signature.Payload(t, j.Tenant, signature.JobID(body), exchange, j.RoutingKey(), body)
	ce := func(s string) []byte { return []byte(s) } // the Worker sends ce-* values as byte arrays
	return amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Timestamp:    now,
		Body:         body,
		Headers: amqp.Table{
			"ce-specversion":       ce("1.0"),
			"ce-id":                ce(j.EventID()),
			"ce-source":            ce(j.Source),
			"ce-type":              ce("studio.lerian.job." + j.Status),
			"ce-time":              ce(now.UTC().Format(time.RFC3339Nano)),
			"ce-schemaversion":     ce("1.0.0"),
			"ce-resourcetype":      ce("job"),
			"ce-eventtype":         ce(j.Status),
			"ce-subject":           ce(j.ID),
			"ce-datacontenttype":   ce("application/json"),
			"ce-tenantid":          ce(j.Tenant),
			signature.TenantHeader: j.Tenant,
			"X-Request-Id":         "req-" + j.ID,
			"x-retry-count":        int32(0),
			"t":                    t,
			"signature-version":    signature.Version,
			"x-message-signature":  signature.Sign(key, payload),
		},
	}
}
