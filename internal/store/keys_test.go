package store

import (
	"crypto/sha256"
	"testing"

	"github.com/mercamap/relay/internal/store/storetest"
)

// storetest writes the keys tests read and edit directly; they must be the store's own,
// or a test would read a key nothing writes and pass untested.
func TestStoretestKeysAreTheStoresOwn(t *testing.T) {
	const acct, id, channel, code = "acct_1", "orders-bus", "destination:orders-bus", "a-sign-in-code"
	for _, k := range []struct{ storetest, store string }{
		{storetest.LogKey(acct), logKey(acct)},
		{storetest.DestKey(acct, id), destKey(acct, id)},
		{storetest.HoldersKey(acct), holdersKey(acct)},
		{storetest.OutboxKey(acct), outboxKey(acct)},
		{storetest.AttemptsKey(acct, id), attemptsKey(acct, id)},
		{storetest.RetriesKey(acct, id), retriesKey(acct, id)},
		{storetest.ChanKey(acct, channel), chanKey(acct, channel)},
		{storetest.ChanSeqKey(acct, channel), chanSeqKey(acct, channel)},
		{storetest.DedupKey(acct), dedupKey(acct)},
		{storetest.TrimKey(acct), trimKey(acct)},
		{storetest.BucketKey(acct, "action:account"), bucketKey(acct, "action:account")},
		{storetest.SignInCodeKey(acct, code), signInCodeKey(acct, sha256.Sum256([]byte(code)))},
		{storetest.TokensKey, tokensKey},
		{storetest.ReplicasKey, replicasKey},
	} {
		if k.storetest != k.store {
			t.Errorf("storetest names %q where the store writes %q", k.storetest, k.store)
		}
	}
	if p := storetest.AccountPrefix(acct); p != logKey(acct)[:len(p)] || p != destKey(acct, id)[:len(p)] {
		t.Errorf("storetest's prefix of an account's keys, %q, does not start them", p)
	}
}
