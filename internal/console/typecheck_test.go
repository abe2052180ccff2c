package console_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mercamap/relay/internal/testpeer"
)

// TestTheModulesTypeCheckAgainstTheAPIDocument: types/openapi.d.ts is what
// openapi-typescript makes of api/openapi.yaml now, and tsc --checkJs finds no error in
// the page's modules, whose API answers and bodies are typed by it (api.js's typedefs):
// a field the document renames or drops fails here.
func TestTheModulesTypeCheckAgainstTheAPIDocument(t *testing.T) {
	gen, tsc := testpeer.APITool(t, "openapi-typescript"), testpeer.APITool(t, "tsc")
	out := filepath.Join(t.TempDir(), "openapi.d.ts")
	if b, err := exec.Command(gen, "../../api/openapi.yaml", "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("openapi-typescript: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile("types/openapi.d.ts"); !bytes.Equal(got, want) {
		t.Error("types/openapi.d.ts is not what api/openapi.yaml makes: run " +
			"openapi-typescript api/openapi.yaml -o internal/console/types/openapi.d.ts")
	}
	if b, err := exec.Command(tsc, "-p", "tsconfig.json").CombinedOutput(); err != nil {
		t.Fatalf("tsc --checkJs: %v\n%s", err, b)
	}
}
