package client_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	apidoc "github.com/mercamap/relay/api"
)

// TestTheTypesAreGeneratedFromTheDocumentAsItIs: types.gen.go is what the pinned
// oapi-codegen makes of api/openapi.yaml now, so a change of the document reaches the
// client (go generate ./client/ after changing it).
func TestTheTypesAreGeneratedFromTheDocumentAsItIs(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "types.gen.go")
	cfg, err := os.ReadFile("oapi-codegen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg = bytes.Replace(cfg, []byte("output: types.gen.go"), []byte("output: "+out), 1)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "tool", "oapi-codegen", "-config", filepath.Join(dir, "config.yaml"), "../api/openapi.yaml")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("types.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("client/types.gen.go is not what api/openapi.yaml makes: run go generate ./client/")
	}
}

// TestTheServedDocumentMakesAClientThatBuilds: what GET /v1/openapi.json answers
// (api.JSON) is enough for oapi-codegen to make a whole client, types and one method per
// operation, that compiles: what a platform writing its own client starts from.
func TestTheServedDocumentMakesAClientThatBuilds(t *testing.T) {
	served, err := apidoc.JSON()
	if err != nil {
		t.Fatal(err)
	}
	// Inside the module, so the build finds oapi-codegen's runtime in go.mod.
	dir, err := os.MkdirTemp(".", "generated-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	doc := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(doc, served, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "relayapi.go")
	gen := exec.Command("go", "tool", "oapi-codegen", "-generate", "types,client", "-package", "relayapi", "-o", out, doc)
	if b, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen on the served document: %v\n%s", err, b)
	}
	if b, err := exec.Command("go", "build", "./"+dir).CombinedOutput(); err != nil {
		t.Fatalf("the generated client does not build: %v\n%s", err, b)
	}
}
