// Package storetest is what tests need of the store that the relay itself does not: the
// Redis keys a test reads or edits directly, the lease reads, and the few direct edits a
// test makes. It works on the store's Redis client (store.Store.Client) and imports no
// relay package, so the store's own tests use it too. Only tests and the bench tools
// import it; nothing the relay runs does.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The keys, as internal/store/keys.go and its neighbours write them (the stored format:
// TestStoretestKeysAreTheStoresOwn in package store holds them to it). Every key of an
// account carries the hash tag {acct}.

// AccountPrefix starts every key of acct; AccountPattern matches them all (SCAN, KEYS).
func AccountPrefix(acct string) string  { return "relay:{" + acct + "}:" }
func AccountPattern(acct string) string { return AccountPrefix(acct) + "*" }

func LogKey(acct string) string              { return AccountPrefix(acct) + "log" }
func DestKey(acct, id string) string         { return AccountPrefix(acct) + "dest:" + id }
func HoldersKey(acct string) string          { return AccountPrefix(acct) + "holders" }
func OutboxKey(acct string) string           { return AccountPrefix(acct) + "outbox" }
func AttemptsKey(acct, id string) string     { return AccountPrefix(acct) + "attempts:" + id }
func RetriesKey(acct, id string) string      { return AccountPrefix(acct) + "retries:" + id }
func ChanKey(acct, channel string) string    { return AccountPrefix(acct) + "chan:" + channel }
func ChanSeqKey(acct, channel string) string { return ChanKey(acct, channel) + ":seq" }
func DedupKey(acct string) string            { return AccountPrefix(acct) + "dd" }
func TrimKey(acct string) string             { return AccountPrefix(acct) + "trim" }

// BucketKey is one rate limit's bucket of acct (store.Limiter: key as the limit names
// it, "action:account"); BucketPattern matches all of acct's.
func BucketKey(acct, key string) string { return AccountPrefix(acct) + "rl:" + key }
func BucketPattern(acct string) string  { return BucketKey(acct, "*") }

// SignInCodeKey holds an unused sign-in code of acct (kept under its SHA-256, never as
// the code).
func SignInCodeKey(acct, code string) string {
	digest := sha256.Sum256([]byte(code))
	return AccountPrefix(acct) + "signin:" + hex.EncodeToString(digest[:])
}

// TokensKey is the set of the API tokens' digests; it belongs to no account.
const TokensKey = "relay:{api-tokens}:known"

// ReplicasKey is the set of live replicas (score: last heartbeat, ms). AboutKey and
// DeploymentKey, in its slot, are internal/upgrade's: each replica's release, and the
// deployment's state format and newest release (TestStoretestKeysAreUpgradesOwn there).
const (
	ReplicasKey   = "relay:{replicas}"
	AboutKey      = "relay:{replicas}:about"
	DeploymentKey = "relay:{replicas}:deployment"
)

// LastLogID is the id of the newest entry of acct's log, "0-0" when it is empty.
func LastLogID(ctx context.Context, rdb redis.UniversalClient, acct string) (string, error) {
	msgs, err := rdb.XRevRangeN(ctx, LogKey(acct), "+", "-", 1).Result()
	if err != nil || len(msgs) == 0 {
		return "0-0", err
	}
	return msgs[0].ID, nil
}

// LeaseHolder names the replica holding destination id's lease and its fencing token
// ("" and 0 when none does): the owner its hash names, while that owner's entry in the
// account's holders hash is live (its expiry after Redis's clock) under the same gen.
// Both hashes are read in one transaction, then the clock.
func LeaseHolder(ctx context.Context, rdb redis.UniversalClient, acct, id string) (string, int64, error) {
	var dest *redis.SliceCmd
	var holders *redis.MapStringStringCmd
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		dest = p.HMGet(ctx, DestKey(acct, id), "holder", "lease_token")
		holders = p.HGetAll(ctx, HoldersKey(acct))
		return nil
	}); err != nil {
		return "", 0, err
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return "", 0, err
	}
	holder, _ := dest.Val()[0].(string) // "owner|gen"
	i := strings.LastIndexByte(holder, '|')
	if i < 0 {
		return "", 0, nil
	}
	owner, gen := holder[:i], holder[i+1:]
	entry := holders.Val()[owner] // "gen|expiry ms"
	j := strings.LastIndexByte(entry, '|')
	if j < 0 {
		return "", 0, nil
	}
	expiry, err := strconv.ParseUint(entry[j+1:], 10, 63)
	if err != nil || int64(expiry) <= now.UnixMilli() || entry[:j] != gen {
		return "", 0, nil
	}
	token, _ := dest.Val()[1].(string)
	if token == "" {
		token = "0"
	}
	tok, err := strconv.ParseInt(token, 10, 64)
	return owner, tok, err
}

// EndHold ends owner's hold of acct's leases, as its expiry would (every lease it holds
// there is free to take at once).
func EndHold(ctx context.Context, rdb redis.UniversalClient, acct, owner string) error {
	return rdb.HDel(ctx, HoldersKey(acct), owner).Err()
}
