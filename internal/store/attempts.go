package store

import (
	"context"
	"strconv"
	"time"
)

// A destination's attempt log, read back newest first: add_attempt (lua.go) writes its
// lines, attemptline.go reads them.

// Attempt is one entry of a destination's attempt log.
type Attempt struct {
	N       int64     `json:"n"`
	At      time.Time `json:"at"`
	EventID string    `json:"event_id"`
	Outcome string    `json:"outcome"`
	Message string    `json:"message"`
	// RetryOf is the attempt a retry wrote again (on its "retry_queued" line and on its
	// outcome's), Retry the request's line on the outcome's; 0 otherwise.
	RetryOf int64 `json:"retry_of,omitempty"`
	Retry   int64 `json:"retry,omitempty"`
}

// Attempts returns up to limit attempts numbered below before (0: the newest), newest first.
func (s *Store) Attempts(ctx context.Context, r Ref, before, limit int64) ([]Attempt, error) {
	end := "+"
	if before > 0 {
		end = "(" + strconv.FormatInt(before, 10) + "-0"
	}
	msgs, err := s.rdb.XRevRangeN(ctx, attemptsKey(r.Account, r.ID), end, "-", limit).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Attempt, len(msgs))
	for i, m := range msgs {
		out[i] = attemptOf(m)
	}
	return out, nil
}
