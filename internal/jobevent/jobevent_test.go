package jobevent

import (
	"encoding/json"
	"testing"
	"time"
)

func TestPadMakesTheBodyExactlyTheSizeAskedAndKeepsItsFields(t *testing.T) {
	j := Job{ID: "0190a8f2-7c1e-7b3a-9f00-4c2d8e1a5b66", Status: "completed"}
	body := j.DefaultBody(time.Unix(1764460800, 0))
	for _, size := range []int{len(body) + 40, 1024, 65536} {
		got, err := Pad(body, size)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != size {
			t.Errorf("Pad to %d: %d bytes", size, len(got))
		}
		var doc struct {
			JobID    string `json:"jobId"`
			Metadata struct {
				Source string `json:"source"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(got, &doc); err != nil || doc.JobID != j.ID || doc.Metadata.Source != "reporter" {
			t.Errorf("Pad to %d: jobId %q, source %q, err %v", size, doc.JobID, doc.Metadata.Source, err)
		}
	}
	if got, _ := Pad(body, 10); len(got) < len(body) {
		t.Errorf("a body longer than asked was cut to %d bytes", len(got))
	}
	if _, err := Pad([]byte(`{"jobId":"x"}`), 1024); err == nil {
		t.Error("a body without metadata padded without an error")
	}
}
