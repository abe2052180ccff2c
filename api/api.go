// Package api holds the relay's API as a published contract: the OpenAPI 3.1 document
// (openapi.yaml) every route the relay serves is checked against, and that the relay
// serves as JSON at GET /v1/openapi.json. It holds no code that serves or calls a route.
package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"go.yaml.in/yaml/v3"
)

// YAML is the document as written.
//
//go:embed openapi.yaml
var YAML []byte

var (
	jsonOnce sync.Once
	jsonDoc  []byte
	jsonErr  error
)

// JSON is the document as JSON, converted once.
func JSON() ([]byte, error) {
	jsonOnce.Do(func() {
		var doc any
		if jsonErr = yaml.Unmarshal(YAML, &doc); jsonErr != nil {
			jsonErr = fmt.Errorf("api/openapi.yaml: %w", jsonErr)
			return
		}
		jsonDoc, jsonErr = json.Marshal(doc)
	})
	return jsonDoc, jsonErr
}
