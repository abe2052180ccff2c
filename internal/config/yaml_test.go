package config

import (
	"strings"
	"testing"
)

func TestATabInTheIndentationIsNamedWithItsLineColumnAndTheFix(t *testing.T) {
	data := "rabbitmq:\n  url: env:RELAY_RABBITMQ_URL\n  exchange: fetcher.job.events\nredis:\n \turl: env:RELAY_REDIS_URL\n"
	_, err := Parse([]byte(data), env(nil), nil)
	ps := problemsOf(t, err)
	if len(ps) != 1 {
		t.Fatalf("problems = %v, want one", ps)
	}
	msg := ps[0].Message
	for _, want := range []string{"line 5, column 2", "tab", "replace the tab with spaces"} {
		if !strings.Contains(msg, want) {
			t.Errorf("problem %q does not say %q", msg, want)
		}
	}
}

func TestATabInsideAValueIsNotMistakenForIndentation(t *testing.T) {
	if _, _, ok := indentTab([]byte("a: \"x\ty\"\nb:\n  - c\n")); ok {
		t.Fatal("indentTab found a tab in the indentation of a file with none there")
	}
}
