package dispatch

import (
	"context"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
)

// TestDisabledCounterSaysWhoDisabled: relay_destinations_disabled_total tells an
// operator's deliberate disable (its cascade counted too) from one by the rejections in a
// row, so the alert that pages can follow the rejections alone. Both start at 0.
func TestDisabledCounterSaysWhoDisabled(t *testing.T) {
	sink := newTestSink(func(dest string, _ destination.Message, _ int) error {
		if dest == "refused" {
			return failures.NewRejected("AccessDeniedException: the role may not write to the bus", nil)
		}
		return nil
	})
	r := newRig(t, sink, bus("refused", "111122223333"), bus("switched-off", "444455556666"))
	byOperator, byRejections := r.d.opts.Metrics.Disabled.WithLabelValues(store.DisabledByOperator),
		r.d.opts.Metrics.Disabled.WithLabelValues(store.DisabledByRejections)
	if testutil.ToFloat64(byOperator) != 0 || testutil.ToFloat64(byRejections) != 0 {
		t.Fatal("relay_destinations_disabled_total does not start at 0 for both")
	}
	if _, err := r.d.Disable(context.Background(), "switched-off", "the customer asked"); err != nil {
		t.Fatal(err)
	}
	r.start()
	r.publish(slices.Repeat([]string{"job.completed"}, 20)...) // delivery.disable_after
	waitFor(t, "the rejections' disable counted", func() bool { return testutil.ToFloat64(byRejections) == 1 })
	if n := testutil.ToFloat64(byOperator); n != 1 {
		t.Errorf("relay_destinations_disabled_total{by=operator} = %v, want 1", n)
	}
	if st := r.state("refused"); st.Disabled == nil || st.Disabled.By != store.DisabledByRejections {
		t.Errorf("refused: %+v, want disabled by the rejections", st.Disabled)
	}
}
