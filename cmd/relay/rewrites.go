package main

import (
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/upgrade"
)

// rewrites are this release's background rewrites of keys already in Redis, each run
// once its state format is in force (upgrade.Rewrite).
func rewrites(st *store.Store) []upgrade.Rewrite {
	return []upgrade.Rewrite{{
		// The channel counters of destinations deleted before format 2, kept for good
		// then, get the life a delete leaves one from format 2 on (store.Forget,
		// Store.SetDeletedCounterLife).
		Name: "deleted-destination-counters", Format: store.CounterLifetime,
		Match: store.CounterPattern, Apply: st.ExpireDeletedCounter,
	}}
}
