package api

import (
	"net/http"

	apidoc "github.com/mercamap/relay/api"
)

// openAPI is GET /v1/openapi.json: the API's OpenAPI document (api/openapi.yaml) as
// JSON, with any token or none, since it holds nothing an account owns.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	doc, err := apidoc.JSON()
	if err != nil {
		s.internal(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(doc)
}
