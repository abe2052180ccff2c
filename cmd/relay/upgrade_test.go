package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay"
	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/testpeer"
)

// relay version, relay --version, the last release the build knows and the API's
// document all name VERSION.
func TestVersionNamesTheReleaseOfVERSION(t *testing.T) {
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(b))
	if relay.Version() != version || thisRelease().Version != version {
		t.Fatalf("the build says %s (release %s), VERSION %s", relay.Version(), thisRelease().Version, version)
	}
	// The API's document names the release too.
	doc, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "\ninfo:\n  title: relay API\n  version: "+version+"\n") {
		t.Errorf("api/openapi.yaml's info.version is not %s", version)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, func(string) string { return "" }, nil, &out, &out); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out.String(), "relay "+version) || !strings.Contains(out.String(), "rolls over relay "+previousRelease().Version) {
			t.Errorf("relay %v: %q, want relay %s and the release it rolls over", args, out.String(), version)
		}
	}
}

// A running relay's heartbeat names its release: relay upgrade status lists it beside a
// replica of the unnumbered release (a heartbeat with no version, as b01080b's), the
// format in force and the switch it waits for; /metrics says relay_build_info and the
// format, and the switch comes by itself once that replica's heartbeat is gone.
func TestUpgradeStatusNamesEachReplicasReleaseAndTheFormatInForce(t *testing.T) {
	amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
	bin := buildRelay(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	metricsListen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	cfg := writeConfig(t, amqpURL, redisURL, "relay-test-upgrade-"+suffix, "relay-test-upgrade-"+suffix)
	withMetrics(t, cfg, metricsListen)
	brokerChannel(t, amqpURL, "relay-test-upgrade-"+suffix)
	cmd, logs := startRelay(t, bin, cfg)
	waitUntil(t, 60*time.Second, "/readyz 200", func() bool { return httpDo(t, "GET", "http://"+metricsListen+"/readyz", "").status == 200 })

	rdb := redisClient(t, redisURL)
	// An old replica's lease heartbeat: a member of the live set, no entry of its own.
	if err := rdb.ZAdd(context.Background(), storetest.ReplicasKey, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "old-pod-1-abc"}).Err(); err != nil {
		t.Fatal(err)
	}
	relayCmd := func(args ...string) ([]byte, error) {
		c := exec.Command(bin, args...)
		c.Env = append(os.Environ(), "TEST_HMAC_KEY="+testKeyHex)
		return c.CombinedOutput()
	}
	var status string
	if !waitFor(30*time.Second, func() bool {
		out, err := relayCmd("upgrade", "status", "--config", cfg)
		status = string(out)
		return err == nil && strings.Contains(status, "2 live") && strings.Contains(status, "relay "+relay.Version()+" ")
	}) {
		t.Fatalf("relay upgrade status does not list both replicas:\n%s", status)
	}
	// Beside a replica that cannot read this release's format, format 1 stays in force
	// and the switch waits for it.
	target := thisRelease().Target()
	for _, want := range []string{"state format: 1 in force (always)", "old-pod-1-abc", "relay 0.1.0", "deployment:   newest release started relay " + relay.Version(),
		fmt.Sprintf("pending:      the switch to state format %d waits for 1 replica(s) that cannot read it: old-pod-1-abc", target)} {
		if !strings.Contains(status, want) {
			t.Errorf("relay upgrade status does not say %q:\n%s", want, status)
		}
	}
	if out, err := relayCmd("upgrade", "finish", "--config", cfg); err == nil || !strings.Contains(string(out), "old-pod-1-abc") {
		t.Errorf("relay upgrade finish beside a replica that cannot read format %d: %v: %s; want it refused naming the replica", target, err, out)
	}
	page := httpDo(t, "GET", "http://"+metricsListen+"/metrics", "").body
	for _, want := range []string{`relay_build_info{goversion="`, `version="` + relay.Version() + `"`, "relay_state_format 1", "relay_upgrade_pending 1", `relay_upgrade_replicas{version="` + relay.Version() + `"} 1`} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Once that replica's heartbeat is gone, the relay switches by itself.
	if err := rdb.ZRem(context.Background(), storetest.ReplicasKey, "old-pod-1-abc").Err(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(30*time.Second, func() bool {
		out, err := relayCmd("upgrade", "status", "--config", cfg)
		status = string(out)
		return err == nil && strings.Contains(status, fmt.Sprintf("state format: %d in force (since relay %s switched", target, relay.Version())) &&
			strings.Contains(status, "pending:      nothing")
	}) {
		t.Fatalf("relay upgrade status once the old replica left does not show the switch to format %d:\n%s", target, status)
	}
	if !waitFor(30*time.Second, func() bool {
		return strings.Contains(httpDo(t, "GET", "http://"+metricsListen+"/metrics", "").body, fmt.Sprintf("relay_state_format %d", target))
	}) {
		t.Errorf("/metrics does not say relay_state_format %d after the switch", target)
	}
	// Stopping removes its heartbeat entry at once.
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, cmd, 30*time.Second, logs); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, logs)
	}
	if n := rdb.HLen(context.Background(), storetest.AboutKey).Val(); n != 0 {
		t.Errorf("%d heartbeat entries left after the only relay stopped", n)
	}
}

// A release that cannot run beside this deployment exits non-zero before writing
// anything, with one sentence naming both releases and the fix.
func TestARelayRefusesToStartBesideAFormatOrAReleaseItCannotRunWith(t *testing.T) {
	for _, c := range []struct {
		what   string
		fields []any
		want   []string
	}{
		{"a format switched by a newer release", []any{"format", "3", "format_since", "0.4.0", "release", "0.4.0", "release_previous", relay.Version()},
			[]string{"relay " + relay.Version() + " cannot start", "state format 3", "switched by relay 0.4.0", "run relay 0.4.0 or later"}},
		{"a deployment two releases ahead", []any{"format", "1", "release", "0.5.0", "release_previous", "0.4.0"},
			[]string{"relay " + relay.Version() + " cannot start", "this deployment last ran relay 0.5.0", "more than one release ahead"}},
		// Values that do not read are refused, never taken for format 1.
		{"a format that is a word", []any{"format", "abc"},
			[]string{"relay " + relay.Version() + " cannot start", `relay:{replicas}:deployment field "format" holds "abc"`}},
		{"a format that overflows", []any{"format", "99999999999999999999"},
			[]string{"relay " + relay.Version() + " cannot start", `field "format" holds "99999999999999999999"`}},
		{"a negative format", []any{"format", "-1"},
			[]string{"relay " + relay.Version() + " cannot start", `field "format" holds "-1"`}},
		{"a release with an escape sequence", []any{"format", "1", "release", "0.3.0\x1b[2J"},
			[]string{"relay " + relay.Version() + " cannot start", `field "release" holds "0.3.0\x1b[2J"`}},
	} {
		t.Run(c.what, func(t *testing.T) {
			amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
			bin := buildRelay(t)
			suffix := fmt.Sprint(time.Now().UnixNano())
			cfg := writeConfig(t, amqpURL, redisURL, "relay-test-refuse-"+suffix, "relay-test-refuse-"+suffix)
			rdb := redisClient(t, redisURL)
			if err := rdb.HSet(context.Background(), storetest.DeploymentKey, c.fields...).Err(); err != nil {
				t.Fatal(err)
			}
			cmd, logs := startRelay(t, bin, cfg)
			err := waitExit(t, cmd, 60*time.Second, logs)
			if err == nil {
				t.Fatalf("relay started beside %s; logs:\n%s", c.what, logs)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			last := lines[len(lines)-1]
			for _, w := range c.want {
				if !strings.Contains(last, w) {
					t.Errorf("its last line %q does not say %q", last, w)
				}
			}
			if strings.Contains(logs.String(), "\x1b") {
				t.Errorf("its logs hold an escape character read from Redis: %q", logs)
			}
			// Nothing written: no heartbeat entry, no destination state.
			if n := rdb.Exists(context.Background(), storetest.AboutKey).Val(); n != 0 {
				t.Errorf("a refused relay left its heartbeat entry")
			}
			if keys := rdb.Keys(context.Background(), storetest.AccountPattern("acct_1")).Val(); len(keys) != 0 {
				t.Errorf("a refused relay wrote %v", keys)
			}
		})
	}
}

// withMetrics sets cfg's api.metrics_listen to listen.
func withMetrics(t *testing.T, cfg, listen string) {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), "metrics_listen: 127.0.0.1:0", "metrics_listen: "+listen, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

func redisClient(t *testing.T, url string) redis.UniversalClient {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
