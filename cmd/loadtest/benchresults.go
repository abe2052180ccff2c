package main

import (
	"slices"
	"time"
)

// What a row records: a benchResult for the row, a repResult for each timed repetition
// of its relay and a bareResult for each of its bare path's, filled in by
// benchsitting.go and benchtimed.go and read by the report and the verdicts.

// latencies are publish-to-bus-answer times, sorted.
type latencies []time.Duration

func (l latencies) at(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(int(float64(len(l))*q), len(l)-1)]
}

func sortDurations(l latencies) { slices.Sort(l) }

// benchResult is one row: one relay process, its warm-up and idle window, then its
// timed repetitions, each followed by a repetition of its bare path.
type benchResult struct {
	benchRun
	reps                 []repResult
	dups                 int
	rssIdle, rssEnd, hwm int           // kB
	startup              time.Duration // relay start → every destination has the warm-up event
	bareTime             time.Duration // the bare path's set-up (sessions, clients, warm-up), once the relay is warm
	idleFor              time.Duration
	idleCPU              []masterCPU   // per Redis master, over idleFor after the warm-up, nothing published
	idleRelayCPU         time.Duration // the relay process over the same window
	idleSlices           []idleSlice   // the same window, read every idleSliceLen
	// A memory row's used_memory (every master) before its first timed repetition and
	// once its destination has committed the last, and then what the destination holds.
	memBefore, memAfter int64
	destMemory          []keyMemory
	earlier             history // earlier runs' estimates of the figures judged on it (-history)
	err                 string
}

// repResult is one timed repetition: E events published, until every destination has
// them (the ingest row: until the account's log holds them); the CPU of each process
// over the same span.
type repResult struct {
	perSec    float64 // deliveries/s (the ingest row: events stored/s)
	lat       latencies
	redisCPU  []masterCPU   // per Redis master
	relayCPU  time.Duration // the relay process (/proc/PID/stat)
	loadCPU   time.Duration // this process: the publisher
	busCPU    time.Duration // the `loadtest bus` process: the sandbox EventBridge
	rabbitCPU time.Duration // the broker (-rabbit-pid), 0 when not given
	bare      *bareResult   // the bare path's repetition of the same index
	memGrowth int64         // the ingest row: used_memory once the log holds the events, less before the first publish
	dedupSize int64         // the ingest row: MEMORY USAGE of the account's dedup keys once the log holds the events
	logLen    int64         // the ingest row: the log's length then (the markers' count)
	// assumeCalls is how many AssumeRole calls STS answered meanwhile: each reads the
	// role's ExternalId from Redis (RequireExternalIDOf), a cost that is the bench's own.
	assumeCalls int
}

// masterCPU is the CPU time (used_cpu_user + used_cpu_sys of INFO cpu) one Redis master
// spent over a timed span.
type masterCPU struct {
	addr string
	cpu  time.Duration
}

// idleSlice is one stretch of a row's idle window: what Redis (every master) and the
// relay spent over it, and how long it took.
type idleSlice struct {
	redis, relay, took time.Duration
}

// idleSliceLen is how long each idleSlice of an idle window is (the last may be
// shorter): 15 s makes 3, a minute 12.
const idleSliceLen = 5 * time.Second

// bareResult is one repetition of a row's bare path: the bare pipeline for one
// destination, the bare fan-out for many.
type bareResult struct {
	perSec    float64
	lat       latencies     // the bare pipeline's publish-to-bus latencies (none for the fan-out)
	loadCPU   time.Duration // this process: publisher and consumer, or the fan-out's writers
	busCPU    time.Duration // the bus process
	rabbitCPU time.Duration
	err       string
}

// redisTotal is the CPU of every master of rep together.
func (rep repResult) redisTotal() time.Duration {
	var t time.Duration
	for _, m := range rep.redisCPU {
		t += m.cpu
	}
	return t
}
