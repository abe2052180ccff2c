package api_test

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/mercamap/relay/internal/api/apitest"
)

// TestTheServedOpenAPIDocumentIsValidAndNeedsNoToken: GET /v1/openapi.json answers, with
// no token, a document kin-openapi loads and validates with no error, and it is the
// OpenAPI 3.1 document of this API (every route of the contract is in it).
func TestTheServedOpenAPIDocumentIsValidAndNeedsNoToken(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	a := call(t, "GET", r.URL+"/v1/openapi.json", "", "")
	if a.status != 200 || a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d %s", a.status, a.header.Get("Content-Type"))
	}
	doc, err := openapi3.NewLoader().LoadFromData(a.body)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the served document does not validate: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi %q, want 3.1", doc.OpenAPI)
	}
	for _, p := range []string{"/v1/connectors/{connector}/destinations", "/v1/streams/{channel}/subscribe", "/v1/sessions", "/healthz", "/metrics"} {
		if doc.Paths.Find(p) == nil {
			t.Errorf("the document has no %s", p)
		}
	}
}
