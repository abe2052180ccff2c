package main

import (
	"context"
	"fmt"
)

// The bare path a row's relay is measured against: the bare pipeline (bare.go) for one
// destination, the bare fan-out (fanout.go) for many, one repetition of it after each
// of the relay's.

// barePath is a row's bare path, set up once the row's relay is warm and its idle cost
// read: run is one repetition of it, run right after each of the relay's (ABAB…), so
// that both see the machine as it is at that moment.
type barePath interface {
	run(ctx context.Context) *bareResult
	close()
}

// newBarePath sets up row r's bare path: the bare pipeline for one destination, the bare
// fan-out for many, none (nil) for ingest.
func (e *benchEnv) newBarePath(ctx context.Context, r benchRun, idx int) (barePath, error) {
	switch {
	case r.ingestOnly(), r.delayed: // a late row is judged against its bound, not a bare path
		return nil, nil
	case r.dests == 1:
		p, err := newBarePipeline(ctx, r, idx, e.amqpURL, e.key, e.bus, e.rabbitPID)
		if err != nil {
			return nil, fmt.Errorf("bare pipeline: %w", err)
		}
		return p, nil
	}
	f, err := newFanOut(ctx, r, idx, e.stsURL, e.sts, e.bus, e.key)
	if err != nil {
		return nil, fmt.Errorf("bare fan-out: %w", err)
	}
	return &fanOutPath{f: f, r: r, key: e.key, bus: e.bus}, nil
}

// fanOutPath is the bare fan-out as a row's bare path: each repetition the row's events
// to every destination's bus.
type fanOutPath struct {
	f   *fanOut
	r   benchRun
	key []byte
	bus *remoteBus
}

func (p *fanOutPath) run(ctx context.Context) *bareResult {
	evs := make([]*event, p.r.events)
	for i := range evs {
		evs[i] = sizedEvent("bench.fanout", p.key, i+1, p.r.size)
	}
	return p.f.run(ctx, evs, p.bus)
}

func (p *fanOutPath) close() { p.f.close() }

// failedBare is a bare path that could not be set up: each repetition says why.
type failedBare string

func (f failedBare) run(context.Context) *bareResult { return &bareResult{err: string(f)} }
func (failedBare) close()                            {}
