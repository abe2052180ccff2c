package store

import (
	"strconv"
	"testing"

	"github.com/mercamap/relay/internal/testpeer"
)

// onEachRedis runs test on a private single Redis server and on the test binary's
// shared Redis Cluster (emptied first): every store test must pass on both.
func onEachRedis(t *testing.T, test func(t *testing.T, st *Store)) {
	t.Helper()
	t.Run("single", func(t *testing.T) { test(t, open(t, Options{URL: testpeer.RedisURL(t)})) })
	t.Run("cluster", func(t *testing.T) { test(t, open(t, Options{URL: testpeer.SharedRedisCluster(t).URL()})) })
}

// open connects a Store for the test and closes it when the test ends.
func open(t *testing.T, o Options) *Store {
	t.Helper()
	st, err := Connect(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// sameSlotAs returns an account name, prefix followed by a number, whose keys share the
// hash slot of acct's.
func sameSlotAs(acct, prefix string) string {
	for i := 0; ; i++ {
		if other := prefix + strconv.Itoa(i); slot(logKey(other)) == slot(logKey(acct)) {
			return other
		}
	}
}
