package cloudevent_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/mercamap/relay/internal/cloudevent"
)

func TestFromAMQPCheckedAnswersAsFromAMQP(t *testing.T) {
	noSpec := minimal("ce-")
	delete(noSpec, "ce-specversion")
	withTenant := minimal("ce-")
	withTenant["ce-tenantid"] = []byte("t1")
	for _, h := range []map[string]any{minimal("ce-"), minimal("cloudEvents_"), noSpec, withTenant} {
		for _, body := range []string{`{}`, `{"jobId":"j"}`, `not json`, ``, `{"a":`} {
			want, wantErr := cloudevent.FromAMQP(h, []byte(body))
			got, err := cloudevent.FromAMQPChecked(h, []byte(body), json.Valid([]byte(body)))
			if !reflect.DeepEqual(got, want) || reasonOf(t, err) != reasonOf(t, wantErr) ||
				(err != nil && err.Error() != wantErr.Error()) {
				t.Fatalf("headers %v, body %q: got %+v, %v; FromAMQP %+v, %v", h, body, got, err, want, wantErr)
			}
		}
	}
}
