package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"
)

// WithTLS makes the client speak TLS with cfg: it verifies the servers with
// cfg.RootCAs and presents cfg's client certificate, if any. Every endpoint
// is then reached with https, whether it was given with a scheme or not.
func WithTLS(cfg *tls.Config) Option {
	return func(c *Client) {
		c.hc = &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
			TLSClientConfig:     cfg,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
		}}
		for i, e := range c.endpoints {
			if rest, ok := strings.CutPrefix(e, "http://"); ok {
				c.endpoints[i] = "https://" + rest
			}
		}
	}
}

// handshakeFailed reports whether err is a TLS handshake failure on the
// client's side: the request was never sent, so it is safe to retry
// anywhere, even a write.
func handshakeFailed(err error) bool {
	var (
		verr *tls.CertificateVerificationError
		rerr tls.RecordHeaderError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
	)
	return errors.As(err, &verr) || errors.As(err, &rerr) || errors.As(err, &uerr) || errors.As(err, &herr) || errors.As(err, &cerr)
}
