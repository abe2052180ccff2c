// Package cloudevent owns reading a CloudEvents 1.0 binary-mode event out of
// AMQP headers and a JSON body. It only reads: it never verifies signatures,
// deduplicates or logs, and never trusts an attribute beyond its syntax.
package cloudevent

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mercamap/relay/internal/jsonscan"
)

// Event is one CloudEvent read from a delivery.
type Event struct {
	ID, Source, Type, SpecVersion, Subject, Tenant, SchemaVersion, DataContentType string

	Time       string            // ce-time as sent (RFC 3339)
	Extensions map[string]string // every other attribute, by lowercase name without prefix
	Data       json.RawMessage   // the body, verified to be JSON; it aliases the body passed in
}

// Reason says why a delivery is not an event this package can read.
type Reason string

const (
	NotACloudEvent Reason = "not_a_cloudevent"
	BodyNotJSON    Reason = "body_not_json"
)

// Error is the only error FromAMQP returns.
type Error struct {
	Reason Reason
	Detail string
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Detail }

// prefixes are the attribute prefixes producers use, highest precedence first.
var prefixes = [...]string{"ce-", "cloudEvents_", "cloudEvents:"}

// Header reads one AMQP header case-insensitively; values may be string or
// []byte (AMQP byte arrays), other types are formatted. ok is false when absent.
// An exact-case match wins; among other case variants the smallest key wins,
// so the answer never depends on map order.
func Header(headers map[string]any, name string) (string, bool) {
	if v, ok := headers[name]; ok {
		return format(v), true
	}
	best, found := "", false
	for k := range headers {
		if strings.EqualFold(k, name) && (!found || k < best) {
			best, found = k, true
		}
	}
	if !found {
		return "", false
	}
	return format(headers[best]), true
}

// Attribute reads a CloudEvents attribute under any of the prefixes "ce-",
// "cloudEvents_" and "cloudEvents:", case-insensitively. When several are
// present, "ce-" wins over "cloudEvents_" over "cloudEvents:".
func Attribute(headers map[string]any, name string) (string, bool) {
	best, bestRank := "", len(prefixes)
	for k := range headers {
		attr, rank, ok := splitAttribute(k)
		if ok && strings.EqualFold(attr, name) && precedes(k, rank, best, bestRank) {
			best, bestRank = k, rank
		}
	}
	if bestRank == len(prefixes) {
		return "", false
	}
	return format(headers[best]), true
}

// splitAttribute strips a CloudEvents prefix from a header name and returns the
// attribute name and the prefix's rank in prefixes.
func splitAttribute(key string) (attr string, rank int, ok bool) {
	for r, p := range prefixes {
		if len(key) > len(p) && strings.EqualFold(key[:len(p)], p) {
			return key[len(p):], r, true
		}
	}
	return "", 0, false
}

// precedes orders two headers carrying the same attribute: lower prefix rank
// first, then the smaller key.
func precedes(key string, rank int, other string, otherRank int) bool {
	return rank < otherRank || (rank == otherRank && key < other)
}

// format renders a header value as text without fmt for the common types.
func format(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	case int32:
		return strconv.FormatInt(int64(x), 10)
	case int64:
		return strconv.FormatInt(x, 10)
	case int:
		return strconv.Itoa(x)
	case bool:
		return strconv.FormatBool(x)
	default:
		return fmt.Sprint(x)
	}
}

// FromAMQP builds the event from binary-mode headers and the body. ce-id,
// ce-type and ce-specversion are required and specversion must be 1.0 (else
// NotACloudEvent); the body must be valid JSON (else BodyNotJSON). Tenant is
// the tenantid attribute, else the X-Tenant-ID header, else "".
func FromAMQP(headers map[string]any, body []byte) (Event, error) {
	e, err := fromHeaders(headers)
	if err != nil {
		return Event{}, err
	}
	return e.withBody(headers, body, jsonscan.Valid(body))
}

// FromAMQPChecked is FromAMQP for a caller that has already run json.Valid on the
// body: bodyJSON is its result, and the body is not scanned again.
func FromAMQPChecked(headers map[string]any, body []byte, bodyJSON bool) (Event, error) {
	e, err := fromHeaders(headers)
	if err != nil {
		return Event{}, err
	}
	return e.withBody(headers, body, bodyJSON)
}

// fromHeaders reads the attributes and checks the required ones.
func fromHeaders(headers map[string]any) (Event, error) {
	var e Event
	if !e.collect(headers, false) {
		// Two headers carry the same attribute: redo it in a fixed order.
		e = Event{}
		e.collect(headers, true)
	}

	var missing []string
	if e.ID == "" {
		missing = append(missing, "ce-id")
	}
	if e.Type == "" {
		missing = append(missing, "ce-type")
	}
	if e.SpecVersion == "" {
		missing = append(missing, "ce-specversion")
	}
	if len(missing) > 0 {
		return Event{}, &Error{NotACloudEvent, "missing " + strings.Join(missing, ", ")}
	}
	if e.SpecVersion != "1.0" {
		return Event{}, &Error{NotACloudEvent, "specversion " + clip(e.SpecVersion) + " is not 1.0"}
	}
	return e, nil
}

// withBody completes an event read by fromHeaders with its body, which json.Valid
// accepted when bodyJSON is true.
func (e Event) withBody(headers map[string]any, body []byte, bodyJSON bool) (Event, error) {
	if !bodyJSON {
		return Event{}, &Error{BodyNotJSON, fmt.Sprintf("body of %d bytes is not valid JSON", len(body))}
	}
	e.Data = body
	if tenant, ok := e.Extensions["tenantid"]; ok && tenant != "" {
		e.Tenant = tenant
	} else if tenant, ok := Header(headers, "X-Tenant-ID"); ok {
		e.Tenant = tenant
	}
	return e, nil
}

// collect sets every attribute found in headers. Visiting the map once is the
// fast path; it returns false as soon as one attribute comes twice, and the
// caller then asks for ordered, where lower-precedence headers are applied
// first so the winner is always the same.
func (e *Event) collect(headers map[string]any, ordered bool) bool {
	var seen uint16
	if !ordered {
		for k, v := range headers {
			if attr, _, ok := splitAttribute(k); ok && !e.set(&seen, attr, format(v)) {
				return false
			}
		}
		return true
	}
	type entry struct {
		key  string
		rank int
	}
	var entries []entry
	for k := range headers {
		if _, rank, ok := splitAttribute(k); ok {
			entries = append(entries, entry{k, rank})
		}
	}
	// Ascending precedence: the last one applied wins.
	slices.SortFunc(entries, func(a, b entry) int {
		switch {
		case precedes(a.key, a.rank, b.key, b.rank):
			return 1
		case precedes(b.key, b.rank, a.key, a.rank):
			return -1
		}
		return 0
	})
	for _, en := range entries {
		attr, _, _ := splitAttribute(en.key)
		e.set(&seen, attr, format(headers[en.key]))
	}
	return true
}

// set stores one attribute and reports false when it was already set; seen
// records which of the named fields have been set.
func (e *Event) set(seen *uint16, attr, value string) bool {
	name := strings.ToLower(attr)
	var field *string
	var bit uint16
	switch name {
	case "id":
		field, bit = &e.ID, 1<<0
	case "source":
		field, bit = &e.Source, 1<<1
	case "type":
		field, bit = &e.Type, 1<<2
	case "specversion":
		field, bit = &e.SpecVersion, 1<<3
	case "subject":
		field, bit = &e.Subject, 1<<4
	case "time":
		field, bit = &e.Time, 1<<5
	case "schemaversion":
		field, bit = &e.SchemaVersion, 1<<6
	case "datacontenttype":
		field, bit = &e.DataContentType, 1<<7
	default:
		if e.Extensions == nil {
			e.Extensions = make(map[string]string, 4)
		}
		_, dup := e.Extensions[name]
		e.Extensions[name] = value
		return !dup
	}
	dup := *seen&bit != 0
	*seen |= bit
	*field = value
	return !dup
}

// clip quotes a header value for an error detail, cut short so a hostile
// producer cannot flood the logs.
func clip(s string) string {
	const max = 32
	if len(s) > max {
		s = s[:max]
	}
	return strconv.Quote(s)
}

// shortTypePrefix marks Fetcher's event types.
const shortTypePrefix = "studio.lerian."

// ShortType returns "job.completed" for "studio.lerian.job.completed": the last
// two dot-separated segments of a studio.lerian. type (the remainder when it has
// fewer), and the full type for any other producer.
func (e Event) ShortType() string {
	rest, ok := strings.CutPrefix(e.Type, shortTypePrefix)
	if !ok {
		return e.Type
	}
	last := strings.LastIndexByte(rest, '.')
	if last < 0 {
		return rest
	}
	if prev := strings.LastIndexByte(rest[:last], '.'); prev >= 0 {
		return rest[prev+1:]
	}
	return rest
}
