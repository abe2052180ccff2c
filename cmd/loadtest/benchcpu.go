package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/benchkit"
)

// Processes and CPU: what each process spent over a timed span (the relay's and the
// bus's /proc, this process's own, the broker's, every Redis master's INFO cpu), a
// process's resident memory, and the machine's load and cores for the report.

// spans is the CPU of every process read at the start and the end of a timed span.
type spans struct {
	redis                    map[string]time.Duration
	relay, load, bus, rabbit time.Duration
}

func (e *benchEnv) readSpans(ctx context.Context, rdb redis.UniversalClient, relayPID int) (spans, error) {
	s := spans{relay: procCPU(relayPID), load: benchkit.SelfCPU(), bus: procCPU(e.bus.pid()), rabbit: procCPU(e.rabbitPID)}
	var err error
	s.redis, err = redisCPU(ctx, rdb)
	return s, err
}

// fill sets one's CPU figures to what each process spent between s0 and s1.
func (s1 spans) fill(s0 spans, one *repResult) {
	one.relayCPU, one.loadCPU, one.busCPU, one.rabbitCPU = s1.relay-s0.relay, s1.load-s0.load, s1.bus-s0.bus, s1.rabbit-s0.rabbit
	for _, addr := range slices.Sorted(maps.Keys(s1.redis)) {
		one.redisCPU = append(one.redisCPU, masterCPU{addr, s1.redis[addr] - s0.redis[addr]})
	}
}

// redisCPU reads INFO cpu on every master: used_cpu_user + used_cpu_sys, by address.
func redisCPU(ctx context.Context, rdb redis.UniversalClient) (map[string]time.Duration, error) {
	var mu sync.Mutex
	out := map[string]time.Duration{}
	err := forEachMaster(ctx, rdb, func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		var sec float64
		for _, line := range strings.Split(info, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return fmt.Errorf("INFO cpu %s: %q", k, v)
				}
				sec += f
			}
		}
		mu.Lock()
		out[m.Options().Addr] = time.Duration(sec * float64(time.Second))
		mu.Unlock()
		return nil
	})
	return out, err
}

// procStatus reads VmRSS and VmHWM (kB) of pid.
func procStatus(pid int) (rss, hwm int) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "VmRSS:" {
			rss, _ = strconv.Atoi(f[1])
		}
		if len(f) >= 2 && f[0] == "VmHWM:" {
			hwm, _ = strconv.Atoi(f[1])
		}
	}
	return
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func nproc() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

// procCPU is process pid's CPU time so far (benchkit.ProcCPU); 0 when it cannot be read.
func procCPU(pid int) time.Duration {
	d, _ := benchkit.ProcCPU(pid)
	return d
}
