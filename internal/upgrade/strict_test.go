package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/store"
)

// plant writes fields into key as a hand-made HSET would.
func plant(t *testing.T, st *store.Store, key string, fields ...any) {
	t.Helper()
	if err := st.Client().HSet(context.Background(), key, fields...).Err(); err != nil {
		t.Fatal(err)
	}
}

// unreadable checks that err is a refusal on a value of key's field that does not
// read, naming the key and the field and showing the value escaped.
func unreadable(t *testing.T, err error, key, field, value string) {
	t.Helper()
	var refused *RefusedError
	var bad *UnreadableError
	if !errors.As(err, &refused) || !errors.As(err, &bad) {
		t.Fatalf("start: %v, want a refusal on a value that does not read", err)
	}
	if bad.Key != key || bad.Field != field {
		t.Errorf("refused on %s field %q, want %s field %q", bad.Key, bad.Field, key, field)
	}
	for _, want := range []string{key, strconv.Quote(field), quoted(value)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %s", err, want)
		}
	}
	if strings.ContainsAny(err.Error(), "\x1b\x07\r\n") {
		t.Errorf("refusal %q holds a control character", err)
	}
}

// A format that is not a positive whole number, written as the relay writes one, does
// not read: it is never taken for 1 (nor -1 for a format), a release refuses to start
// on it, finish refuses to switch over it, and a running replica neither switches nor
// stops, going on with the format it writes.
func TestAFormatThatDoesNotReadIsRefusedNotTakenForOne(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		for _, v := range []string{"abc", "99999999999999999999", "-1", "0", "01", " 1", "", "1\x1b[2J"} {
			t.Run(strconv.Quote(v), func(t *testing.T) {
				st.Client().Del(context.Background(), deploymentKey, aboutKey)
				// A 0.3.0 replica alone: it would switch to format 2 at its next heartbeat.
				k := New(Options{Store: st, Owner: "c", Release: r030, Known: knownTo(r030), TTL: ttl,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Stop: func(err error) { t.Errorf("stopped: %v", err) }})
				if err := k.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				plant(t, st, deploymentKey, "format", v)

				s := status(t, st)
				if s.Format != 0 || len(s.Unreadable) != 1 {
					t.Fatalf("format %q read as %d, %d unreadable: %+v", v, s.Format, len(s.Unreadable), s)
				}
				_, err := start(t, st, "d", r020)
				unreadable(t, err, deploymentKey, "format", v)
				if _, err := Finish(context.Background(), st, ttl, r030); err == nil || !strings.Contains(err.Error(), "not switched") {
					t.Fatalf("finish over format %q: %v, want refused", v, err)
				}
				k.round(context.Background())
				if got := st.Client().HGet(context.Background(), deploymentKey, "format").Val(); got != v || k.Writes() != 1 {
					t.Fatalf("a running 0.3.0 over format %q: Redis says %q, it writes %d; want it left alone and 1", v, got, k.Writes())
				}
			})
		}
	})
}

func TestTheDeploymentsOtherFieldsReadStrictly(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		for _, c := range []struct{ field, value string }{
			{"release", "0.2.0\x1b[2J"},
			{"release_previous", "latest"},
			{"format_since", "0.3"},
			{"switched_at", "yesterday"},
			{"switched_at", "-5"},
		} {
			t.Run(c.field+"="+strconv.Quote(c.value), func(t *testing.T) {
				st.Client().Del(context.Background(), deploymentKey, aboutKey)
				plant(t, st, deploymentKey, "format", "1", c.field, c.value)
				s := status(t, st)
				if len(s.Unreadable) != 1 || s.Unreadable[0].Field != c.field || s.Format != 1 {
					t.Fatalf("status: %+v, want format 1 and %s unreadable", s, c.field)
				}
				_, err := start(t, st, "a", r020)
				unreadable(t, err, deploymentKey, c.field, c.value)
			})
		}
	})
}

// heartbeat is a heartbeat entry's JSON, seen an hour ahead so it stays live through
// the test (a lapsed entry is no replica's, read or not).
func heartbeat(version, reads, writes string) string {
	v, _ := json.Marshal(version)
	return fmt.Sprintf(`{"version":%s,"previous":"0.1.0","reads":%s,"writes":%s,"seen":%d}`, v, reads, writes, time.Now().Add(time.Hour).UnixMilli())
}

// A heartbeat that does not read is listed as such, blocks a switch (it may be an old
// replica's), and a release refuses to start beside it; once it is gone the switch is
// made.
func TestAHeartbeatThatDoesNotReadBlocksTheSwitchAndTheStart(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		for _, c := range []struct{ what, raw, says string }{
			{"writes a format it does not read", heartbeat("0.2.0", "[1]", "[2]"), "writes state format 2, which it does not read"},
			{"writes two formats", heartbeat("0.3.0", "[1,2]", "[1,2]"), "writes must name the one state format"},
			{"writes none", heartbeat("0.2.0", "[1]", "[]"), "writes must name the one state format"},
			{"reads none", heartbeat("0.2.0", "[]", "[1]"), "it reads no state format"},
			{"reads a negative format", heartbeat("0.2.0", "[-1,1]", "[1]"), "positive state formats"},
			{"reads a format twice", heartbeat("0.2.0", "[1,1]", "[1]"), "twice"},
			{"reads a format that overflows", heartbeat("0.2.0", "[99999999999999999999]", "[1]"), "wrong type"},
			{"has no version", heartbeat("", "[1]", "[1]"), "its version must be a release's"},
			{"has an escape sequence for a version", heartbeat("0.2.0\x1b[2J", "[1]", "[1]"), "its version must be a release's"},
			{"has a string for reads", `{"version":"0.2.0","reads":"1","writes":[1],"seen":` + strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10) + `}`, "wrong type"},
		} {
			t.Run(c.what, func(t *testing.T) {
				st.Client().Del(context.Background(), deploymentKey, aboutKey)
				k := New(Options{Store: st, Owner: "c", Release: r030, Known: knownTo(r030), TTL: ttl,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err := k.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				plant(t, st, aboutKey, "odd\x1b[2J", c.raw)

				s := status(t, st)
				if len(s.Unreadable) != 1 || !strings.Contains(s.Unreadable[0].Error(), c.says) {
					t.Fatalf("unreadable %v, want one saying %q", s.Unreadable, c.says)
				}
				if w := s.Waiting(2); len(w) != 1 || w[0].Owner != "odd\x1b[2J" || w[0].Unreadable == nil {
					t.Fatalf("waiting for format 2: %+v, want the replica whose heartbeat does not read", w)
				}
				if p := s.Pending(r030); !strings.Contains(p, `"odd\x1b[2J" (its heartbeat does not read`) {
					t.Errorf("pending %q does not name it escaped", p)
				}
				_, err := start(t, st, "d", r030)
				unreadable(t, err, aboutKey, "odd\x1b[2J", c.raw)

				k.round(context.Background())
				if k.Writes() != 1 || status(t, st).Format != 1 {
					t.Fatalf("switched to format %d beside a heartbeat that does not read", k.Writes())
				}
				st.Client().HDel(context.Background(), aboutKey, "odd\x1b[2J")
				k.round(context.Background())
				if k.Writes() != 2 {
					t.Fatalf("not switched once it was gone: writes %d", k.Writes())
				}
			})
		}
	})
}

// An entry that is not JSON, or whose seen is no number, is no heartbeat of any release:
// the next heartbeat drops it, where a seen that is no number used to stop the script
// and with it every replica's heartbeat. Until then it is listed, not skipped.
func TestAHeartbeatEntryThatIsNotJSONIsListedThenDropped(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		plant(t, st, aboutKey, "garbled", "{not json\x1b[2J", "seen-a-word", `{"version":"0.2.0","reads":[1],"writes":[1],"seen":"abc"}`, "a-list", "[2]",
			"seen-nan", `{"version":"0.2.0","reads":[1],"writes":[1],"seen":NaN}`, "seen-inf", `{"version":"0.2.0","reads":[1],"writes":[1],"seen":1e999}`)
		s := status(t, st)
		if len(s.Unreadable) != 5 || !strings.Contains(s.Unreadable[1].Error(), `"garbled" holds "{not json\x1b[2J": not JSON`) {
			t.Fatalf("unreadable %v, want all five, the JSON that is none escaped", s.Unreadable)
		}
		if err := announce(context.Background(), st.Client(), "a", r020, 1, ttl); err != nil {
			t.Fatalf("a heartbeat beside an entry whose seen is no number: %v", err)
		}
		if n := st.Client().HLen(context.Background(), aboutKey).Val(); n != 1 {
			t.Fatalf("%d entries after a heartbeat, want only its own", n)
		}
	})
}

// A replica's heartbeat says the one format it writes now: the one in force, then the
// new one once it has switched.
func TestAHeartbeatSaysTheFormatItsReplicaWritesNow(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		old, err := start(t, st, "old", r020)
		if err != nil {
			t.Fatal(err)
		}
		nu, err := start(t, st, "new", r030)
		if err != nil {
			t.Fatal(err)
		}
		writes := func(owner string) []int {
			for _, r := range status(t, st).Replicas {
				if r.Owner == owner {
					return r.Release.Writes
				}
			}
			return nil
		}
		if w := writes("new"); len(w) != 1 || w[0] != 1 {
			t.Fatalf("0.3.0 beside 0.2.0 says it writes %v, want [1]", w)
		}
		old.stop()
		waitFor(t, "the switch", func() bool { return nu.k.Writes() == 2 })
		waitFor(t, "its heartbeat saying format 2", func() bool { w := writes("new"); return len(w) == 1 && w[0] == 2 })
		if s := status(t, st); len(s.WritingOther()) != 0 || len(s.Unreadable) != 0 {
			t.Fatalf("after the switch: %+v", s)
		}
	})
}

func TestShownEscapesAnythingATerminalCouldActOn(t *testing.T) {
	for in, want := range map[string]string{
		"relay-7d9f8c6b5-x2x4q-1-3fa2c1": "relay-7d9f8c6b5-x2x4q-1-3fa2c1",
		"":                               `""`,
		"a b":                            `"a b"`,
		"\x1b[2J":                        `"\x1b[2J"`,
		"x\u202ey":                       `"x\u202ey"`,
		"ok\n":                           `"ok\n"`,
	} {
		if got := Shown(in); got != want {
			t.Errorf("Shown(%q) = %s, want %s", in, got, want)
		}
	}
	long := strings.Repeat("\x1b", 1000)
	e := &UnreadableError{Key: aboutKey, Field: "f", Value: long, Why: "w"}
	if len(e.Error()) > 800 || !strings.Contains(e.Error(), "(1000 bytes)") || strings.Contains(e.Error(), "\x1b") {
		t.Errorf("a 1,000-byte value shows as %d bytes: %.100q", len(e.Error()), e.Error())
	}
}
