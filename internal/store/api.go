package store

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Read helpers for the operator API and its channels. Each read that a client compares
// against a channel sequence is one MULTI, so the state it returns is exactly the state
// after that sequence: every script that changes a destination emits in the same call.

// AccountStates reads the states of an account's destinations (ids) and the account
// channel's sequence in one MULTI. Each State.Sequence is that destination's own channel
// sequence; a destination with no stored state is left out of the map.
func (s *Store) AccountStates(ctx context.Context, acct string, ids []string) (map[string]State, int64, error) {
	pipe := s.rdb.TxPipeline()
	hs := make([]*redis.MapStringStringCmd, len(ids))
	seqs := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		hs[i] = pipe.HGetAll(ctx, destKey(acct, id))
		seqs[i] = pipe.Get(ctx, chanSeqKey(acct, DestinationChannel(id)))
	}
	acctSeq := pipe.Get(ctx, chanSeqKey(acct, AccountChannel(acct)))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, err
	}
	out := make(map[string]State, len(ids))
	for i, id := range ids {
		if _, ok := hs[i].Val()["status"]; !ok { // nothing, or only a lease
			continue
		}
		st := stateFrom(hs[i].Val())
		st.Sequence, _ = strconv.ParseInt(seqs[i].Val(), 10, 64)
		out[id] = st
	}
	n, _ := strconv.ParseInt(acctSeq.Val(), 10, 64)
	return out, n, nil
}

// ChannelRef names one channel of one account.
type ChannelRef struct{ Account, Channel string }

// ChannelSequences reads the current sequence of each channel in one round trip (a
// pipeline, so channels of different accounts may live on different cluster slots).
func (s *Store) ChannelSequences(ctx context.Context, chans []ChannelRef) ([]int64, error) {
	if len(chans) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(chans))
	for i, c := range chans {
		cmds[i] = pipe.Get(ctx, chanSeqKey(c.Account, c.Channel))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]int64, len(chans))
	for i, c := range cmds {
		out[i], _ = strconv.ParseInt(c.Val(), 10, 64)
	}
	return out, nil
}
