// Package benchkit is what the bench commands (cmd/loadtest, cmd/benchingest) and the
// tests that count round trips share: a process's CPU time, medians, and a go-redis
// hook that counts round trips. It only measures: it starts and changes nothing.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockTick is USER_HZ, the unit of /proc/PID/stat times: 100 on every Linux Go runs on.
const clockTick = 10 * time.Millisecond

// ProcCPU is the CPU time (utime + stime, every thread) of process pid so far, from
// /proc/PID/stat.
func ProcCPU(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("no process %d", pid)
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count the fields after its closing ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	var utime, stime int64
	if _, err := fmt.Sscan(f[11], &utime); err != nil {
		return 0, err
	}
	if _, err := fmt.Sscan(f[12], &stime); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// SelfCPU is this process's CPU time so far, user + system; 0 when it cannot be read.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Median is the median of xs (the mean of the middle two of an even count); 0 for none.
// xs is not changed.
func Median[T ~int | ~int64 | ~float64](xs []T) T {
	if len(xs) == 0 {
		var zero T
		return zero
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// RoundTrips is a go-redis hook (AddHook) that counts what a client sends: N, one per
// command and one per pipeline; Cmds, the commands they carried.
type RoundTrips struct{ N, Cmds atomic.Int64 }

func (*RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.N.Add(1)
		r.Cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.N.Add(1)
		r.Cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
