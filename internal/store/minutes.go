package store

import (
	"context"
	"strconv"
	"time"
)

// The chart's counts: per destination, how many attempts of the ordered stream were
// delivered and how many failed (rejected, not taken, expired) in each minute of the
// last 24 hours. They live in one hash in the destination's slot,
// relay:{acct}:minutes:<id>, written by the commit script (MinuteCountLua) and read
// whole by Minutes. Each field is one of the day's 1440 minute slots: "d<slot>" or
// "f<slot>", slot = minute mod 1440, and its value is minute × minuteStamp + count, so a
// slot last written a day (or more) ago is seen as stale by its writer, which starts it
// over, and by Minutes, which skips it. The hash holds at most 2,880 fields whatever the
// traffic, and expires a day after its last write. Tests and retries are not counted
// (a retry is outside the ordered stream; a test writes no event of the log).

func minutesKey(acct, id string) string { return "relay:{" + acct + "}:minutes:" + id }

// MinuteSlots is how many minutes the chart covers: 24 hours.
const MinuteSlots = 1440

// minuteStamp separates a field's minute from its count: up to 10 million a minute.
const minuteStamp = 10_000_000

// MinuteCountLua counts one committed attempt in its minute. It is spliced into the
// commit script's commit_one (commit.go, one marked line) after the outcome is known,
// and reads its locals kind, is_test, now_ms, dest_id, put and chart_minute (the
// destination hash's field of that name, read with the rest): the minute this
// destination last counted in. Within that minute a commit costs one HINCRBY; the
// first of a new minute starts both of its slots over (one HSET, they may hold a day-old
// minute) and renews the hash's expiry. The hash's key is derived from KEYS[1]
// (relay:{acct}:dest:<id>), so it shares the destination's slot.
const MinuteCountLua = `
  if not is_test and kind ~= 'skip' then
    local mk = string.sub(KEYS[1], 1, #KEYS[1] - #dest_id - 6) .. ':minutes:' .. dest_id
    local minute = math.floor(now_ms / 60000)
    local slot = minute % 1440
    local field = (kind == 'delivered' and 'd' or 'f') .. slot
    if tonumber(chart_minute or '-1') == minute then
      redis.call('HINCRBY', mk, field, 1)
    else
      local base, d = minute * 10000000, kind == 'delivered' and 1 or 0
      redis.call('HSET', mk, 'd' .. slot, string.format('%.0f', base + d), 'f' .. slot, string.format('%.0f', base + 1 - d))
      redis.call('PEXPIRE', mk, 90000000)
      put('chart_minute', minute)
    end
  end
`

// MinuteSeries is a destination's chart: Delivered[i] and Failed[i] are the counts of
// the minute starting at From + i minutes, oldest first, the last being the current one.
type MinuteSeries struct {
	From      time.Time `json:"from"`
	Step      int       `json:"step_seconds"`
	Delivered []int64   `json:"delivered"`
	Failed    []int64   `json:"failed"`
}

// Minutes reads a destination's chart for the 1440 minutes up to now: one HGETALL of at
// most 2,880 small fields.
func (s *Store) Minutes(ctx context.Context, r Ref, now time.Time) (MinuteSeries, error) {
	h, err := s.rdb.HGetAll(ctx, minutesKey(r.Account, r.ID)).Result()
	if err != nil {
		return MinuteSeries{}, err
	}
	last := now.UnixMilli() / 60000
	first := last - MinuteSlots + 1
	out := MinuteSeries{From: time.UnixMilli(first * 60000).UTC(), Step: 60,
		Delivered: make([]int64, MinuteSlots), Failed: make([]int64, MinuteSlots)}
	for k, v := range h {
		if len(k) < 2 {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		minute, count := n/minuteStamp, n%minuteStamp
		if minute < first || minute > last {
			continue // a slot of another day
		}
		switch k[0] {
		case 'd':
			out.Delivered[minute-first] = count
		case 'f':
			out.Failed[minute-first] = count
		}
	}
	return out, nil
}
