package benchkit

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Monitor counts what a Redis server runs, as the server itself reports it (MONITOR):
// each command a client sent, and apart from them each command a script ran inside
// ("[0 lua]" in MONITOR's lines). Its counts are Redis's own, whatever the client
// library, pipelining or scripts: the figure issue 54's aims are stated in.
// MONITOR slows the server, so a run that counts measures nothing else.
type Monitor struct {
	conn net.Conn
	done chan struct{}

	mu     sync.Mutex
	sent   map[string]int // command name (upper case) → times a client sent it
	inside map[string]int // and times a script ran it
	err    error
}

// Counts is what a Monitor saw between two readings.
type Counts struct {
	Sent, Inside map[string]int
}

// StartMonitor connects to the Redis at redisURL (redis://host:port) and counts from
// the moment it returns.
func StartMonitor(redisURL string) (*Monitor, error) {
	u, err := url.Parse(redisURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(conn, 1<<16)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		conn.Close()
		return nil, fmt.Errorf("MONITOR answered %q: %v", line, err)
	}
	m := &Monitor{conn: conn, done: make(chan struct{}), sent: map[string]int{}, inside: map[string]int{}}
	go m.read(r)
	return m, nil
}

// read counts each line MONITOR sends: +<time> [<db> <client>|lua] "<COMMAND>" ….
func (m *Monitor) read(r *bufio.Reader) {
	defer close(m.done)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			m.mu.Lock()
			m.err = err
			m.mu.Unlock()
			return
		}
		open := strings.IndexByte(line, '[')
		end := strings.IndexByte(line, ']')
		if open < 0 || end < open {
			continue
		}
		rest := line[end+1:]
		q := strings.IndexByte(rest, '"')
		if q < 0 {
			continue
		}
		name, _, _ := strings.Cut(rest[q+1:], `"`)
		name = strings.ToUpper(name)
		m.mu.Lock()
		if strings.HasSuffix(line[open:end], " lua") {
			m.inside[name]++
		} else {
			m.sent[name]++
		}
		m.mu.Unlock()
	}
}

// Take returns the counts since the last Take (or the start) and starts again from zero.
func (m *Monitor) Take() Counts {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := Counts{Sent: m.sent, Inside: m.inside}
	m.sent, m.inside = map[string]int{}, map[string]int{}
	return c
}

// Stop ends the count; its error is the reading's, if it failed before Stop.
func (m *Monitor) Stop() error {
	m.mu.Lock()
	err := m.err
	m.mu.Unlock()
	m.conn.Close()
	<-m.done
	return err
}

// Total is how many commands clients sent and how many scripts ran.
func (c Counts) Total() (sent, inside int) {
	for _, n := range c.Sent {
		sent += n
	}
	for _, n := range c.Inside {
		inside += n
	}
	return sent, inside
}

// Per is c's counts divided by n (events, creates), as "sent X (EVALSHA a, …) + inside
// Y (…)" with the commands most run first.
func (c Counts) Per(n int) string {
	sent, inside := c.Total()
	return fmt.Sprintf("sent %.1f (%s) + inside scripts %.1f (%s)",
		float64(sent)/float64(n), breakdown(c.Sent, n), float64(inside)/float64(n), breakdown(c.Inside, n))
}

func breakdown(by map[string]int, n int) string {
	names := make([]string, 0, len(by))
	for name := range by {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if by[a] != by[b] {
			return by[b] - by[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(names))
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(by[name])/float64(n)))
	}
	return strings.Join(parts, ", ")
}
