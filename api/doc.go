// Package api is fenced's HTTP server: the handlers of every route, with
// authentication, limits, follower-to-leader forwarding and watch streams.
// The wire types it speaks are the client module's
// (github.com/fenced/fenced/client), so server and clients cannot drift.
package api
