package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/mercamap/relay/internal/destination"
	"github.com/redis/go-redis/v9"
)

// readCardScript reads what one destination's card shows, in one call: KEYS[1..3] are
// the account's log, position hash and ordinal index (the lag, luaLag), KEYS[4] the
// destination hash, KEYS[5] its channel's counter; ARGV[1] and ARGV[2] the sequence and
// created_at of the state the caller holds ('-1' and empty: none). It answers false for a
// destination with no status (nothing stored, or only a lease's fields), else
// {sequence, lag reading, fresh, fields}: fields is the hash (HGETALL) when fresh is 1,
// and fresh is 0 only when the caller's state is still the stored one. Every script that
// changes what a card shows emits on the destination's channel in the same call, so the
// same sequence is the same state; but a pending destination's check is stored without
// an event (SetupChecked that did not pass, SetupRefusal), so a pending one is always
// read, and a destination deleted and made again (Forget keeps the counter) has a new
// created_at.
var readCardScript = redis.NewScript(luaPrelude + luaLag + `
local h = redis.call('HMGET', KEYS[4], 'status', 'created_at')
if not h[1] then return false end
local seq = tonumber(redis.call('GET', KEYS[5]) or '0')
local lag = lag_reading(lag_base(KEYS[1], KEYS[2], KEYS[3]), KEYS[4])
if seq == tonumber(ARGV[1]) and (h[2] or '') == ARGV[2] and h[1] ~= 'pending' then
  return {seq, lag, 0, {}}
end
return {seq, lag, 1, redis.call('HGETALL', KEYS[4])}
`)

// CardRead is what ReadCard answers.
type CardRead struct {
	Sequence int64 // the destination channel's, now
	// State is the stored state as of Sequence; nil when the state the caller holds is
	// still the stored one.
	State *State
	// Lag is where the destination stands in its account's log (as the lag sampler reads it: QueueLag).
	Lag LagReading
}

// ReadCard reads a destination's card in one script call in its account's slot: its
// channel's sequence, its lag, and its state unless held (the state the caller read
// before, nil: none) is still the stored one, so a card that did not change costs no
// HGETALL nor its decoding. destination.ErrNotFound when it has no stored state.
func (s *Store) ReadCard(ctx context.Context, r Ref, held *State) (CardRead, error) {
	knownSeq, knownCreated := "-1", ""
	if held != nil {
		knownSeq = strconv.FormatInt(held.Sequence, 10)
		if !held.CreatedAt.IsZero() {
			knownCreated = strconv.FormatInt(held.CreatedAt.UnixMilli(), 10)
		}
	}
	keys := []string{logKey(r.Account), posKey(r.Account), ordKey(r.Account), destKey(r.Account, r.ID),
		chanSeqKey(r.Account, DestinationChannel(r.ID))}
	res, err := readCardScript.Run(ctx, s.rdb, keys, knownSeq, knownCreated).Slice()
	if errors.Is(err, redis.Nil) {
		return CardRead{}, destination.ErrNotFound
	}
	if err != nil {
		return CardRead{}, err
	}
	if len(res) < 4 {
		return CardRead{}, fmt.Errorf("read card: unexpected answer %v", res)
	}
	out := CardRead{Sequence: toInt(res[0]), Lag: lagReadingOf(res[1])}
	if toInt(res[2]) == 0 {
		if held == nil {
			return CardRead{}, fmt.Errorf("read card: no state for %s and none held", r.ID)
		}
		return out, nil
	}
	flat, _ := res[3].([]any)
	h := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		h[toStr(flat[i])] = toStr(flat[i+1])
	}
	st := stateFrom(h)
	st.Sequence = out.Sequence
	out.State = &st
	return out, nil
}
