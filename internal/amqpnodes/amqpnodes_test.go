package amqpnodes

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestConnectGoesOnToTheNextNodeAndStartsAfterTheLastOneUsed(t *testing.T) {
	n := New([]string{"a", "b", "c"})
	down := map[string]bool{"a": true}
	var tried []string
	connect := func(url string) error {
		tried = append(tried, url)
		if down[url] {
			return errors.New("connection refused")
		}
		return nil
	}
	if err := n.Connect(connect); err != nil || !slices.Equal(tried, []string{"a", "b"}) {
		t.Fatalf("first connect: %v, tried %v; want b after a", err, tried)
	}
	// b's connection is lost: the next connect starts at c, not at b again.
	tried = nil
	if err := n.Connect(connect); err != nil || !slices.Equal(tried, []string{"c"}) {
		t.Fatalf("after losing b: %v, tried %v; want c", err, tried)
	}
	down = map[string]bool{"a": true, "b": true, "c": true}
	tried = nil
	err := n.Connect(connect)
	if err == nil || !slices.Equal(tried, []string{"a", "b", "c"}) || !strings.Contains(err.Error(), "node 3 of 3: connection refused") {
		t.Fatalf("all down: %v, tried %v", err, tried)
	}
}
