package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/testpeer"
)

// aboutEntry is a heartbeat entry's JSON, seen now.
func aboutEntry(version string, reads, writes []int) string {
	b, _ := json.Marshal(map[string]any{"version": version, "previous": "0.1.0", "reads": reads, "writes": writes, "seen": time.Now().UnixMilli()})
	return string(b)
}

// relay upgrade status says what it could not read in Redis (escaped), still shows the
// rest, never says "nothing" pending over a value it could not read or a replica
// writing another format, and ends with what serve of this release would say here.
func TestUpgradeStatusSaysWhatItCouldNotReadAndShowsNothingRaw(t *testing.T) {
	redisURL := testpeer.RedisURL(t)
	cfg := writeConfig(t, "amqp://guest:guest@127.0.0.1:1/", redisURL, "x", "x")
	rdb := redisClient(t, redisURL)
	me := thisRelease()
	unknown := slices.Max(me.Reads) + 1 // a format this release cannot read
	for _, c := range []struct {
		what       string
		deployment []any
		about      []any
		want       []string
	}{
		{"a format that is a word", []any{"format", "abc"}, []any{"pod-a", aboutEntry(me.Version, me.Reads, []int{1})},
			[]string{"state format: unknown", `unreadable:   relay:{replicas}:deployment field "format" holds "abc": a state format is a positive whole number`,
				"pod-a", "relay " + me.Version, "pending:      unknown", "start:        refused: relay " + me.Version + " cannot start: Redis holds values"}},
		{"a format that overflows", []any{"format", "99999999999999999999"}, nil,
			[]string{"state format: unknown", `holds "99999999999999999999"`, "start:        refused"}},
		{"a negative format", []any{"format", "-1"}, nil,
			[]string{"state format: unknown", `holds "-1"`, "start:        refused"}},
		{"a format this release cannot read", []any{"format", strconv.Itoa(unknown), "format_since", "9.0.0"}, nil,
			[]string{fmt.Sprintf("state format: %d in force (since relay 9.0.0", unknown),
				fmt.Sprintf("no switch this release can make: state format %d is in force", unknown),
				fmt.Sprintf("start:        refused: relay %s cannot start: this deployment's Redis is in state format %d (switched by relay 9.0.0)", me.Version, unknown)}},
		{"a heartbeat that is not JSON", nil, []any{"pod-b", "{\"version\":\x1b[2J", "pod-a", aboutEntry(me.Version, me.Reads, []int{1})},
			[]string{"state format: 1 in force (always)", "replicas:     2 live", "pod-a", `pod-b                                    heartbeat unreadable`,
				`unreadable:   relay:{replicas}:about field "pod-b" holds "{\"version\":\x1b[2J": not JSON`, "start:        refused"}},
		{"a heartbeat writing a format it does not read", nil, []any{"pod-c", aboutEntry("0.2.0", []int{1}, []int{unknown})},
			[]string{fmt.Sprintf("it writes state format %d, which it does not read", unknown), "start:        refused"}},
		{"a heartbeat writing another format than the one in force", nil, []any{"pod-d", aboutEntry(me.Version, []int{1, unknown}, []int{unknown})},
			[]string{fmt.Sprintf("pod-d%s relay %-10s reads [1 %d] writes [%d]", strings.Repeat(" ", 35), me.Version, unknown, unknown),
				"(not the format in force, 1)", fmt.Sprintf("writing:      not every replica writes format 1, the one in force: pod-d writes format [%d]", unknown)}},
		{"escape sequences in a replica's name and release", nil, []any{"pod-\x1b[2J", aboutEntry("0.2.0\x1b[2J", []int{1}, []int{1})},
			[]string{`"pod-\x1b[2J"`, `holds "{\"previous\":\"0.1.0\",\"reads\":[1],\"seen\":`, `\"version\":\"0.2.0\\u001b[2J\"`, "its version must be a release's"}},
	} {
		t.Run(c.what, func(t *testing.T) {
			ctx := context.Background()
			rdb.Del(ctx, storetest.DeploymentKey, storetest.AboutKey, storetest.ReplicasKey)
			if c.deployment != nil {
				rdb.HSet(ctx, storetest.DeploymentKey, c.deployment...)
			}
			if c.about != nil {
				rdb.HSet(ctx, storetest.AboutKey, c.about...)
			}
			out, err := runRelay(t, map[string]string{"TEST_HMAC_KEY": testKeyHex}, "", "upgrade", "status", "--config", cfg)
			if err != nil {
				t.Fatalf("relay upgrade status: %v\n%s", err, out)
			}
			for _, want := range c.want {
				if !strings.Contains(out, want) {
					t.Errorf("status does not say %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "pending:      nothing") {
				t.Errorf("status says nothing is pending:\n%s", out)
			}
			if strings.ContainsAny(out, "\x1b\x07\r") {
				t.Errorf("status printed a control character read from Redis: %q", out)
			}
		})
	}
}
