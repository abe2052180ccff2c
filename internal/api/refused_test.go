package api

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/registry"
	"github.com/mercamap/relay/internal/store"
)

// TestRefusedKnowsEveryAnswerThatNothingWasDone: the errors an action answers when it
// did nothing give the request's tokens back, wrapped or not; an error that leaves
// unknown whether it did something (Redis did not answer) keeps them.
func TestRefusedKnowsEveryAnswerThatNothingWasDone(t *testing.T) {
	for _, err := range []error{
		destination.ErrNotFound, store.ErrTooOld{Oldest: time.Now()}, store.ErrNoSuchEvent,
		dispatch.ErrOperatorDisabled, store.ErrSinceMismatch{Status: store.Active},
		store.ErrNoSuchAttempt, store.ErrNotActive{Status: store.Paused}, store.ErrNotRetryable{Reason: "a test event"},
		store.ErrEventGone, store.ErrRetryQueueFull, dispatch.HeldBack{Wait: time.Second},
		registry.ErrExists, registry.ErrCapped, fmt.Errorf("destination d1: %w", store.ErrNoSuchEvent),
	} {
		if !refused(err) {
			t.Errorf("refused(%v) = false: a refusal spends the account's limits", err)
		}
	}
	for _, err := range []error{nil, errors.New("redis: connection refused"), store.ErrStaleLease} {
		if refused(err) {
			t.Errorf("refused(%v) = true: what may have been carried out gives its tokens back", err)
		}
	}
}
