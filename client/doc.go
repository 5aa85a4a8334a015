// Package client is the Go client of fenced, and the definition of its wire
// protocol: the requests, answers, events and error codes that the server
// also uses, so the two sides cannot drift apart.
//
// It depends on the standard library alone (and the fence module's token
// type): an application that imports it links nothing of the server.
//
//	c := client.New([]string{"10.0.0.1:7700", "10.0.0.2:7700", "10.0.0.3:7700"})
//	g, err := c.Acquire(ctx, client.AcquireRequest{Key: "orders-db", Holder: "worker-1", TTL: "10s"})
//	if err != nil { ... }
//	// send g.Token with every write; the resource refuses lower tokens.
//
// Client retries what is safe to retry and reports an unknown outcome as
// ErrUnknownOutcome, never as a failure. Lease keeps a grant renewed,
// Election campaigns for and observes a leader role, and Watch follows the
// committed changes of a key or a prefix.
package client
