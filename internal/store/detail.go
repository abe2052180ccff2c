package store

import (
	"context"
	"strconv"
)

// AttemptAt reads line n of a destination's attempt log; ErrNoSuchAttempt when the log
// does not hold it (never made, or trimmed). One XRANGE of one entry.
func (s *Store) AttemptAt(ctx context.Context, r Ref, n int64) (Attempt, error) {
	ns := strconv.FormatInt(n, 10) + "-0"
	msgs, err := s.rdb.XRange(ctx, attemptsKey(r.Account, r.ID), ns, ns).Result()
	if err != nil {
		return Attempt{}, err
	}
	if len(msgs) == 0 {
		return Attempt{}, ErrNoSuchAttempt
	}
	return attemptOf(msgs[0]), nil
}

// AttemptEntry reads the account's log entry of an attempt's event, as AskRetry finds
// it (the dedup marker's log id, at or before the attempt's time and a margin):
// ErrNoSuchEvent when the attempt names none (a replayed line, a test) or the log no
// longer holds it.
func (s *Store) AttemptEntry(ctx context.Context, r Ref, a Attempt) (LogEntry, error) {
	if a.EventID == "" {
		return LogEntry{}, ErrNoSuchEvent
	}
	id, err := s.findEventFrom(ctx, r.Account, a.EventID, strconv.FormatInt(a.At.UnixMilli()+logTimeMargin.Milliseconds(), 10))
	if err != nil {
		return LogEntry{}, err
	}
	return s.LogEntryAt(ctx, r.Account, id)
}
