package api

import (
	"github.com/fenced/fenced/ui"
)

// consoleRoute serves the web console (package ui). It is no API route:
// the page holds no data and calls the API like any client, with the
// identity typed into it, so anyone may load it.
const consoleRoute = "GET " + ui.Prefix

func init() { routeAccess[consoleRoute] = accessOpen }

// EnableConsole serves the web console at /ui/ (fenced --ui, on by
// default). Its Content-Security-Policy lets the page read the status of
// the other members, whose API origins it learns from this node's view of
// the cluster.
func (s *Server) EnableConsole() {
	s.Handle(consoleRoute, ui.Handler(s.memberOrigins))
}

// memberOrigins returns the API origins of the members this node knows,
// with the scheme this node serves (every node of a cluster serves the
// same).
func (s *Server) memberOrigins() []string {
	scheme := "http://"
	if s.sec != nil && s.sec.o.TLS {
		scheme = "https://"
	}
	var out []string
	for _, m := range s.node.Status().Members {
		if m.HTTPAddr != "" {
			out = append(out, scheme+m.HTTPAddr)
		}
	}
	return out
}
