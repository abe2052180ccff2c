package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/api/contracttest"
)

// TestOperatorGuideDescribesEverySubcommandItHas: each subcommand `relay --help` lists
// has its row in the operator guide's command table, and no line of the guide says it
// does not exist.
func TestOperatorGuideDescribesEverySubcommandItHas(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, os.Getenv, strings.NewReader(""), &out, &out); err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(out.String(), "Available Commands:")
	if !ok {
		t.Fatalf("relay --help lists no commands:\n%s", out.String())
	}
	list, _, _ = strings.Cut(list, "\n\n")
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] != "help" && f[0] != "completion" {
			names = append(names, f[0])
		}
	}
	if len(names) < 7 {
		t.Fatalf("read %d subcommands from relay --help: %v", len(names), names)
	}
	b, err := os.ReadFile("../../docs/operator-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	guide := string(b)
	for _, name := range names {
		if !strings.Contains(guide, "| `relay "+name) {
			t.Errorf("the operator guide's command table has no row for relay %s", name)
		}
		for _, line := range strings.Split(guide, "\n") {
			if strings.Contains(line, "`relay "+name) && (strings.Contains(line, "not exist") || strings.Contains(line, "not yet")) {
				t.Errorf("the operator guide says relay %s is missing: %s", name, line)
			}
		}
	}
}

// TestAPIReferenceListsEveryRouteTheAPIServes: each route registered on the API's mux
// (internal/api: `m.Handle…("METHOD /path"`) has its row in docs/api.md, written as
// `METHOD /path`, and docs/api.md lists no route the API does not serve.
func TestAPIReferenceListsEveryRouteTheAPIServes(t *testing.T) {
	files, err := filepath.Glob("../../internal/api/*.go")
	if err != nil {
		t.Fatal(err)
	}
	registered := regexp.MustCompile(`m\.Handle(?:Func)?\("([A-Z]+ /[^"]*)"`)
	served := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range registered.FindAllStringSubmatch(string(b), -1) {
			// The console's page ("/console/{$}") and its files ("/console/{file}") are
			// the row of GET /console/.
			route := strings.TrimSuffix(m[1], "{$}")
			if route == "GET /console/{file}" {
				route = "GET /console/"
			}
			served[route] = true
		}
	}
	if len(served) < 15 {
		t.Fatalf("read %d routes from internal/api: %v", len(served), served)
	}
	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for route := range served {
		if !strings.Contains(doc, "| `"+route+"`") {
			t.Errorf("docs/api.md has no row for %s", route)
		}
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z]+ /[^`]*)`").FindAllStringSubmatch(doc, -1) {
		if !served[m[1]] {
			t.Errorf("docs/api.md lists %s, which the API does not serve", m[1])
		}
	}
}

// TestTheOpenAPIDocumentAndTheAPIReferenceListTheSameRoutes: every operation of
// api/openapi.yaml has its row in docs/api.md, written `METHOD /path`, and every row of
// docs/api.md is an operation of the document (the console's files, /console/{file},
// are the row of GET /console/).
func TestTheOpenAPIDocumentAndTheAPIReferenceListTheSameRoutes(t *testing.T) {
	doc, err := contracttest.Document()
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for p, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if p == "/console/{file}" {
				p = "/console/"
			}
			documented[method+" "+p] = true
		}
	}
	b, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	guide := string(b)
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z]+ /[^`]*)`").FindAllStringSubmatch(guide, -1) {
		rows[m[1]] = true
		if !documented[m[1]] {
			t.Errorf("docs/api.md lists %s, which api/openapi.yaml does not", m[1])
		}
	}
	for route := range documented {
		if !rows[route] {
			t.Errorf("api/openapi.yaml has %s, which docs/api.md has no row for", route)
		}
	}
}
