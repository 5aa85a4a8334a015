package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrBadEndpoint: an endpoint is not an http or https address with a host
// and a port in 1-65535. Nothing was sent.
var ErrBadEndpoint = errors.New("bad endpoint")

// ParseEndpoint checks one endpoint, "host:port" or an http(s) URL with a
// port and no path, and returns it as a URL with no trailing slash. It makes
// no network call: a typo is reported before anything is sent.
func ParseEndpoint(s string) (string, error) {
	raw := strings.TrimSpace(s)
	if raw == "" {
		return "", fmt.Errorf("%w: empty", ErrBadEndpoint)
	}
	full := raw
	if !strings.Contains(full, "://") {
		full = "http://" + full
	}
	u, err := url.Parse(full)
	if err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrBadEndpoint, raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%w %q: scheme %q is not http or https", ErrBadEndpoint, raw, u.Scheme)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return "", fmt.Errorf("%w %q: only scheme://host:port, with no path, query or credentials", ErrBadEndpoint, raw)
	}
	if u.Hostname() == "" {
		return "", fmt.Errorf("%w %q: no host", ErrBadEndpoint, raw)
	}
	port := u.Port()
	if port == "" {
		return "", fmt.Errorf("%w %q: no port (fenced listens on 7700 by default: %s:7700)", ErrBadEndpoint, raw, u.Hostname())
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("%w %q: port %s is not in 1-65535", ErrBadEndpoint, raw, port)
	}
	return u.Scheme + "://" + u.Host, nil
}

// ParseEndpoints checks every endpoint with ParseEndpoint, skipping empty
// ones, and reports every bad one at once.
func ParseEndpoints(list []string) ([]string, error) {
	var out []string
	var errs []error
	for _, s := range list {
		if strings.TrimSpace(s) == "" {
			continue
		}
		ep, err := ParseEndpoint(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, ep)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no endpoint given", ErrBadEndpoint)
	}
	return out, nil
}

// failure is why one attempt on one endpoint failed, in words an operator
// can act on.
type failure struct {
	reason string
	// permanent: retrying this endpoint cannot help before its
	// configuration changes (a TLS mismatch, a bad address).
	permanent bool
	// late: the attempt was cut by the caller's deadline; it says less
	// than an earlier failure of the same endpoint.
	late bool
	// timedOut: the attempt's own deadline passed with no answer.
	timedOut bool
	// cause is the error of a permanent failure that callers may want to
	// tell apart (errors.Is(err, ErrRedirected)); nil otherwise.
	cause error
}

// classify names an attempt's failure. timeout is the attempt's own deadline;
// callerDone says the caller's context had ended.
func classify(err error, timeout time.Duration, callerDone bool) failure {
	var apiErr *Error
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &apiErr):
		if apiErr.Code == "not_member" {
			return failure{reason: "not a member (" + apiErr.Message + ")"}
		}
		return failure{reason: apiErr.Error()}
	case errors.Is(err, ErrBadEndpoint), errors.Is(err, ErrRedirected), errors.Is(err, ErrInsecureCredentials):
		return failure{reason: err.Error(), permanent: true, cause: err}
	case isTLSError(err):
		return failure{reason: "TLS: " + tlsReason(err), permanent: true}
	case errors.Is(err, syscall.ECONNREFUSED):
		return failure{reason: "connection refused"}
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return failure{reason: "connection reset"}
	case errors.As(err, &dnsErr):
		return failure{reason: "cannot resolve " + dnsErr.Name + ": " + dnsErr.Err, permanent: dnsErr.IsNotFound}
	case callerDone:
		return failure{reason: "no answer before the caller's deadline", late: true}
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return failure{reason: "timed out after " + timeout.String(), timedOut: true}
	}
	return failure{reason: err.Error()}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isTLSError reports a failed TLS handshake or certificate check, including
// https spoken to a plain HTTP server.
func isTLSError(err error) bool {
	var rh tls.RecordHeaderError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var cv *tls.CertificateVerificationError
	var ae tls.AlertError
	return errors.As(err, &rh) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) ||
		errors.As(err, &cv) || errors.As(err, &ae) || strings.Contains(err.Error(), "HTTP response to HTTPS client") ||
		strings.Contains(err.Error(), "tls: ")
}

// tlsReason words a failed handshake: the certificate check's own error when
// there is one, whole (it may quote other errors, colons and all), else the
// transport's error without the request it was about.
func tlsReason(err error) string {
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) || strings.Contains(err.Error(), "HTTP response to HTTPS client") {
		return "the server does not speak TLS (use http://, or start fenced with TLS)"
	}
	var (
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
		cv *tls.CertificateVerificationError
		ue *url.Error
	)
	switch {
	case errors.As(err, &ua):
		err = ua
	case errors.As(err, &he):
		err = he
	case errors.As(err, &ci):
		err = ci
	case errors.As(err, &cv):
		err = cv.Err
	case errors.As(err, &ue):
		err = ue.Err
	}
	return strings.TrimPrefix(err.Error(), "x509: ")
}

// attemptsError is the error of a request no endpoint served: it names
// every endpoint tried and why it failed. errors.Is finds ErrUnavailable (nothing
// was done) or ErrUnknownOutcome (a write may have been applied), and the
// sentinels of the endpoints' permanent failures (ErrBadEndpoint,
// ErrRedirected, ErrInsecureCredentials).
type attemptsError struct {
	sentinel error
	// ended, when set, is why the attempts stopped: the caller's context
	// ended (its error), or no endpoint accepted a connection in time
	// (ErrNoConnection). errors.Is finds it as well as the sentinel.
	ended   error
	why     string
	order   []string
	reasons map[string]string
	causes  []error
}

func (e *attemptsError) Error() string {
	var b strings.Builder
	// ErrUnknownOutcome's own text speaks of a lost leadership, which is
	// not what happened here: no node confirmed the write in time.
	if e.sentinel == ErrUnknownOutcome {
		b.WriteString("outcome unknown")
	} else {
		b.WriteString(e.sentinel.Error())
	}
	b.WriteString(": ")
	b.WriteString(e.why)
	for i, ep := range e.order {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(ep)
		b.WriteString(": ")
		b.WriteString(e.reasons[ep])
	}
	return b.String()
}

func (e *attemptsError) Unwrap() []error {
	out := append([]error{e.sentinel}, e.causes...)
	if e.ended != nil {
		out = append(out, e.ended)
	}
	return out
}

// failures keeps the latest failure of each endpoint of one request.
type failures struct {
	order []string
	last  map[string]failure
}

func newFailures() *failures { return &failures{last: map[string]failure{}} }

func (f *failures) record(ep string, fl failure) {
	old, ok := f.last[ep]
	if !ok {
		f.order = append(f.order, ep)
	}
	if ok && fl.late {
		fl.reason = old.reason + ", then " + fl.reason
	}
	f.last[ep] = fl
}

// allPermanent reports whether every one of n endpoints failed in a way that
// retrying cannot mend.
func (f *failures) allPermanent(n int) bool {
	if len(f.last) < n {
		return false
	}
	for _, fl := range f.last {
		if !fl.permanent {
			return false
		}
	}
	return true
}

// err is the error of a request no endpoint served; ended, if not nil, is
// why the attempts stopped (see attemptsError).
func (f *failures) err(sentinel error, why string, ended error) error {
	e := &attemptsError{sentinel: sentinel, ended: ended, why: why, order: f.order, reasons: map[string]string{}}
	for _, ep := range f.order {
		fl := f.last[ep]
		e.reasons[ep] = fl.reason
		if fl.cause != nil {
			e.causes = append(e.causes, fl.cause)
		}
	}
	return e
}
