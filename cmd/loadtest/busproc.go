package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mercamap/relay/internal/awstest"
)

// The bench's EventBridge runs in a process of its own (`loadtest bus`, started by
// `loadtest bench`), so that its CPU is a column of its own: the load process's CPU is
// then the publisher's (relay rows), the bare pipeline's consumer's, or the bare
// fan-out's writers' alone, and "relay CPU per delivery / bare fan-out's" compares two
// writers, neither carrying the bus. Both processes stamp with the wall clock of the
// same machine, so the bus's answer times compare with the publisher's send times.

// busStamps is the bus's side: the sandbox's EventBridge (awstest) noting when it took
// each entry, i.e. when it answered the PutEvents that carried it, and answering the
// bench's questions about them under /_bench/.
type busStamps struct {
	inner *awstest.EventBridge
	mu    sync.Mutex
	at    map[string]map[string]int64 // event_id → bus → first take, Unix ns
	// forgotten holds the event ids whose stamps /_bench/forget dropped: a take of one
	// of them is a duplicate, as it was before.
	forgotten map[string]struct{}
	dups      int
	n         int
	more      chan struct{} // closed (and replaced) when n reaches wake
	wake      int           // what the latest /_bench/count?atleast= waits for; 0: none
}

// newBusStamps is the bench's bus: an EventBridge that keeps none of the entries it
// takes, only each one's stamp. Kept whole, an entry of the bench's 1 KB bodies held
// ~1.4 KB of the bus's heap (measured over 200,000), and a full bench run writes about
// 4 million (the relay's and the bare paths' alike): GBs by its end, whose garbage
// collections, marking all of it, fell into one repetition's window or the next, in a
// process whose CPU is in both paths' sums.
func newBusStamps() *busStamps {
	inner := awstest.NewEventBridgeHandler()
	inner.ForgetEntries()
	return &busStamps{inner: inner, at: map[string]map[string]int64{}, forgotten: map[string]struct{}{}, more: make(chan struct{})}
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(c int) { w.code = c; w.ResponseWriter.WriteHeader(c) }

func (s *busStamps) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/_bench/count":
		// ?atleast=N waits (up to a second) until N entries are taken: the bench waits
		// for a repetition's end with a request a second, not a poll every few ms that
		// the bus's and the load process's CPU would carry.
		atLeast, _ := strconv.Atoi(r.URL.Query().Get("atleast"))
		deadline := time.After(time.Second)
		for {
			s.mu.Lock()
			c, more := busCount{N: s.n, Dups: s.dups}, s.more
			if c.N < atLeast {
				s.wake = atLeast
			}
			s.mu.Unlock()
			if c.N >= atLeast {
				json.NewEncoder(w).Encode(c)
				return
			}
			select {
			case <-more:
			case <-deadline:
				json.NewEncoder(w).Encode(c)
				return
			case <-r.Context().Done():
				return
			}
		}
	case "/_bench/stamps":
		var q stampQuery
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(s.stamps(q))
		return
	case "/_bench/forget":
		s.forget()
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	sw := &statusWriter{ResponseWriter: w, code: 200}
	s.inner.ServeHTTP(sw, r)
	now := time.Now().UnixNano()
	if sw.code != 200 {
		return
	}
	var in struct {
		Entries []struct{ EventBusName, Detail string }
	}
	if json.Unmarshal(body, &in) != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range in.Entries {
		var d struct {
			EventID string `json:"event_id"`
		}
		json.Unmarshal([]byte(e.Detail), &d)
		if _, gone := s.forgotten[d.EventID]; gone {
			s.dups++
			continue
		}
		byBus := s.at[d.EventID]
		if byBus == nil {
			byBus = map[string]int64{}
			s.at[d.EventID] = byBus
		}
		if _, ok := byBus[e.EventBusName]; ok {
			s.dups++
			continue
		}
		byBus[e.EventBusName] = now
		s.n++
	}
	if s.wake > 0 && s.n >= s.wake {
		close(s.more)
		s.more, s.wake = make(chan struct{}), 0
	}
}

// forget drops every stamp taken so far, keeping only their event ids (a take of one
// later is a duplicate) and the counts: the bench asks before each repetition, whose
// stamps are all it reads, so the bus holds one repetition's stamps, not a whole run's
// (a map entry per event and bus: millions by the end of a run, and the collections of
// a heap that size, like those of the entries it no longer keeps, fell into the timed
// windows of either path).
func (s *busStamps) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.at {
		s.forgotten[id] = struct{}{}
	}
	s.at = map[string]map[string]int64{}
}

// busCount is what /_bench/count answers: entries taken (first takes) and duplicates.
type busCount struct{ N, Dups int }

// stampQuery asks, for each event id, when each bus whose ARN starts with Prefix took it.
type stampQuery struct {
	IDs    []string
	Prefix string
}

// stamps answers q: per event id, the Unix ns of its first take on each matching bus.
func (s *busStamps) stamps(q stampQuery) map[string][]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]int64, len(q.IDs))
	for _, id := range q.IDs {
		var ts []int64
		for b, at := range s.at[id] {
			if strings.HasPrefix(b, q.Prefix) {
				ts = append(ts, at)
			}
		}
		out[id] = ts
	}
	return out
}

// runBus serves the stamped EventBridge on 127.0.0.1 and prints its URL on stdout,
// until SIGTERM or its parent dies (Pdeathsig).
func runBus(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bus", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newBusStamps()}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	fmt.Fprintf(stdout, "http://%s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// remoteBus is the bench's side of `loadtest bus`: the child process and what it took.
type remoteBus struct {
	url  string
	cmd  *exec.Cmd
	http *http.Client
}

// startBus starts `loadtest bus` (this binary) and waits for its URL.
func startBus(logPath string) (*remoteBus, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "bus")
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { cmd.Wait(); logf.Close() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		return nil, fmt.Errorf("loadtest bus did not start (log %s): %w", logPath, err)
	}
	return &remoteBus{url: strings.TrimSpace(line), cmd: cmd,
		http: &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}, nil
}

func (b *remoteBus) pid() int { return b.cmd.Process.Pid }

func (b *remoteBus) close() { b.cmd.Process.Signal(syscall.SIGTERM) }

func (b *remoteBus) counts() busCount { return b.countAtLeast(0) }

// countAtLeast is the bus's counts once it has taken n entries, or after a second.
func (b *remoteBus) countAtLeast(n int) busCount {
	var c busCount
	resp, err := b.http.Get(b.url + "/_bench/count?atleast=" + strconv.Itoa(n))
	if err != nil {
		time.Sleep(100 * time.Millisecond) // the bus is gone: the caller's stall deadline ends the wait
		return c
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(&c)
	return c
}

// forget makes the bus drop the stamps it holds (busStamps.forget); an error is the
// bus gone, which the next count's stall deadline reports.
func (b *remoteBus) forget() {
	resp, err := b.http.Post(b.url+"/_bench/forget", "application/json", nil)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// count is how many entries the bus has taken (first takes only).
func (b *remoteBus) count() int { return b.counts().N }

// latencies returns, for every event of evs that reached a bus whose ARN starts with
// prefix, the time from its first publish to the bus's answer (sorted), and the last
// answer among them.
func (b *remoteBus) latencies(evs []*event, prefix string) (latencies, time.Time, error) {
	q := stampQuery{Prefix: prefix}
	sent := make(map[string]time.Time, len(evs))
	for _, e := range evs {
		q.IDs = append(q.IDs, e.id)
		sent[e.id] = e.sentAt
	}
	body, _ := json.Marshal(q)
	resp, err := b.http.Post(b.url+"/_bench/stamps", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("the bus's stamps: %w", err)
	}
	defer resp.Body.Close()
	var got map[string][]int64
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		return nil, time.Time{}, fmt.Errorf("the bus's stamps: %w", err)
	}
	var lat latencies
	var last int64
	for id, ts := range got {
		for _, at := range ts {
			lat = append(lat, time.Unix(0, at).Sub(sent[id]))
			last = max(last, at)
		}
	}
	sortDurations(lat)
	return lat, time.Unix(0, last), nil
}
