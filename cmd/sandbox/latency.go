package main

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/mercamap/relay/internal/netdelay"
)

// --latency makes the buses answer late, as a customer's bus in another region would:
// what the relay's config points at (the --events, --kinesis and --pubsub-port
// addresses) is then a netdelay proxy that passes each request on at once and holds each
// answer for the bus's delay, in front of the bus itself on a loopback port of its own.
// STS and the admin API always answer at once, and so does everything the sandbox asks
// of its own buses (GET /arrived).
//
//	--latency 100ms                              every bus 100 ms late
//	--latency eventbridge=100ms,kinesis=20ms     those two; Pub/Sub at once
//	--latency 20ms,pubsub=250ms                  Pub/Sub 250 ms, the others 20 ms

// The buses --latency names.
const (
	busEventBridge = "eventbridge"
	busKinesis     = "kinesis"
	busPubSub      = "pubsub"
)

var latencyBuses = []string{busEventBridge, busKinesis, busPubSub}

// maxLatency bounds a bus's delay: the farthest region is a few hundred ms away, and a
// delay past the relay's write timeout would only time every write out.
const maxLatency = 10 * time.Second

// busLatency is how late each bus answers, by name; a bus not in it answers at once.
type busLatency map[string]time.Duration

// parseLatency reads --latency: comma-separated items, each DURATION (every bus the
// list does not name) or BUS=DURATION, BUS one of latencyBuses, DURATION Go's (100ms,
// 1.5s) from 0 to maxLatency. "" is no latency.
func parseLatency(s string) (busLatency, error) {
	l := busLatency{}
	if strings.TrimSpace(s) == "" {
		return l, nil
	}
	bad := func(item, why string) error {
		return fmt.Errorf("--latency %q: %s: %s (want DURATION for every bus, or BUS=DURATION items separated by commas, BUS one of %s, like 100ms or eventbridge=100ms,pubsub=20ms)",
			s, item, why, strings.Join(latencyBuses, ", "))
	}
	var all *time.Duration
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		bus, dur, named := strings.Cut(item, "=")
		if !named {
			bus, dur = "", item
		}
		bus = strings.ToLower(strings.TrimSpace(bus))
		d, err := time.ParseDuration(strings.TrimSpace(dur))
		switch {
		case item == "":
			return nil, bad(item, "an empty item")
		case named && !slices.Contains(latencyBuses, bus):
			return nil, bad(item, fmt.Sprintf("no bus %q", bus))
		case err != nil:
			return nil, bad(item, fmt.Sprintf("%q is not a duration", strings.TrimSpace(dur)))
		case d < 0 || d > maxLatency:
			return nil, bad(item, fmt.Sprintf("%s is out of range, 0 to %s", d, maxLatency))
		}
		if !named {
			if all != nil {
				return nil, bad(item, "a second delay for every bus")
			}
			all = &d
			continue
		}
		if _, twice := l[bus]; twice {
			return nil, bad(item, fmt.Sprintf("%s named twice", bus))
		}
		l[bus] = d
	}
	if all != nil {
		for _, bus := range latencyBuses {
			if _, ok := l[bus]; !ok {
				l[bus] = *all
			}
		}
	}
	for bus, d := range l {
		if d == 0 {
			delete(l, bus)
		}
	}
	return l, nil
}

// note is what the sandbox prints after a bus's line: "" when it answers at once.
func (l busLatency) note(bus string) string {
	if d := l[bus]; d > 0 {
		return fmt.Sprintf("; answers %s late (--latency)", d)
	}
	return ""
}

// fronts are the netdelay proxies --latency put in front of the buses.
type fronts []*netdelay.Proxy

// listen listens for bus on addr: there, when it answers late, a proxy that holds its
// answers for its delay, and the bus itself on a free loopback port behind it. It
// returns the bus's own listener and the address its clients are told.
func (f *fronts) listen(l busLatency, bus, addr string) (net.Listener, string, error) {
	d := l[bus]
	if d == 0 {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, "", err
		}
		return ln, ln.Addr().String(), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	p, err := f.front(bus, addr, ln.Addr().String(), d)
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	return ln, p, nil
}

// front puts a proxy on addr in front of upstream, d late, and returns its address.
func (f *fronts) front(bus, addr, upstream string, d time.Duration) (string, error) {
	p, err := netdelay.Listen(addr, upstream, d)
	if err != nil {
		return "", fmt.Errorf("%s's delay proxy: %w", bus, err)
	}
	*f = append(*f, p)
	return p.Addr(), nil
}

func (f fronts) close() {
	for _, p := range f {
		p.Close()
	}
}
