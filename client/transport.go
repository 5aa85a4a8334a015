package client

import (
	"errors"
	"fmt"
	"net"
	"net/http"
)

var (
	// ErrRedirected: a node answered with a redirect (3xx). fenced nodes
	// never redirect, so something else answers at that address (a proxy,
	// another service); the client does not follow it, which would send the
	// request, and its credentials, where nobody pointed the client.
	ErrRedirected = errors.New("redirect not followed")
	// ErrInsecureCredentials: the client has a bearer token and the
	// endpoint is plain http to a host that is not loopback. Nothing was
	// sent: use https (WithTLS), or WithInsecureCredentials on a network
	// you trust.
	ErrInsecureCredentials = errors.New("credentials not sent over plain http")
)

// WithInsecureCredentials lets the client send its bearer token over plain
// http to any host, for a network the caller trusts (a private test
// network, a node reached through an encrypting tunnel). Without it a token
// goes over plain http only to loopback addresses.
func WithInsecureCredentials() Option { return func(c *Client) { c.insecureCredentials = true } }

// noRedirects keeps the client's HTTP client from following redirects: the
// answer comes back as it is, and do turns it into ErrRedirected. The
// caller's http.Client (WithHTTPClient) is copied, not changed.
func noRedirects(hc *http.Client) *http.Client {
	cp := *hc
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// roundTrip sends req with the client's credentials, by the two rules above: never
// a token over plain http to a remote host, never a redirect followed.
func (c *Client) roundTrip(req *http.Request) (*http.Response, error) {
	if c.token != "" {
		if req.URL.Scheme != "https" && !c.insecureCredentials && !loopback(req.URL.Hostname()) {
			return nil, fmt.Errorf("%w: the bearer token is not sent to %s over plain http: reach it with https (WithTLS), or use WithInsecureCredentials on a network you trust",
				ErrInsecureCredentials, req.URL.Host)
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 3 {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s answered %d with a redirect to %q; fenced nodes never redirect (is another service or a proxy at this address?)",
			ErrRedirected, req.URL.Host, resp.StatusCode, resp.Header.Get("Location"))
	}
	return resp, nil
}

// loopback reports whether host names this machine: "localhost", or a
// loopback IP address.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
