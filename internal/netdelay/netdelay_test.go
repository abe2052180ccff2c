package netdelay

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAnswersArriveLateAndWhole(t *testing.T) {
	body := strings.Repeat("x", 200<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	defer srv.Close()
	p, err := Listen("127.0.0.1:0", strings.TrimPrefix(srv.URL, "http://"), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 3 { // a kept-alive connection is as late as a new one
		start := time.Now()
		resp, err := http.Get("http://" + p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if err != nil || string(got) != body {
			t.Fatalf("through the proxy: %d bytes, %v; want the %d the server sent", len(got), err, len(body))
		}
		if took < 50*time.Millisecond || took > 500*time.Millisecond {
			t.Fatalf("round trip %v, want about the 50 ms delay", took)
		}
	}
}
