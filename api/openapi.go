package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3.1 document of the HTTP API, served at
// GET /v1/openapi.yaml. Tests drive every route of a real server and validate
// each request and answer against it, so it cannot drift from the handlers.
//
//go:embed openapi.yaml
var OpenAPI []byte

// openAPIRoute is the route serving the document.
const openAPIRoute = "GET /v1/openapi.yaml"

// The document describes the API; it holds no secret, so it is open to
// anyone, like /healthz.
func init() { routeAccess[openAPIRoute] = accessOpen }

// routeOpenAPI mounts the document on the server's mux.
func (s *Server) routeOpenAPI() {
	s.mux.HandleFunc(openAPIRoute, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(OpenAPI)
	})
}
