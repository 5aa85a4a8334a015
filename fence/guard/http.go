package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/fence/proof"
)

// HeaderName is the HTTP header that carries a fencing token, as decimal text.
const HeaderName = "Fencing-Token"

// Error codes of the JSON bodies Middleware answers with.
const (
	// CodeMalformedToken: the Fencing-Token header is missing, repeated or not
	// the strict decimal text of a token (status 400).
	CodeMalformedToken = "malformed_token"
	// CodeBadKey: the key function could not name the protected key (400).
	CodeBadKey = "bad_key"
	// CodeStaleToken: the token is lower than one already admitted for the key
	// (409); the body's "highest" field holds that token.
	CodeStaleToken = "stale_token"
	// CodeInvalidProof: the guard checks proofs (a *Signed) and the
	// Fencing-Proof header is missing where required, repeated, or not a
	// genuine proof of this grant by a pinned key (403); the body's
	// "reason" names the refusal (proof_signature, proof_unknown_signer, …).
	CodeInvalidProof = "invalid_proof"
	// CodeGuardUnavailable: the guard could not decide, for instance a storage
	// error (503). The request was not admitted; it may be retried.
	CodeGuardUnavailable = "guard_unavailable"
)

// ErrorBody is the JSON body of every refusal Middleware writes. Tokens are
// decimal strings, never JSON numbers, which lose precision above 2^53.
type ErrorBody struct {
	Code    string       `json:"code"`
	Message string       `json:"message"`
	Key     string       `json:"key,omitempty"`
	Token   *fence.Token `json:"token,omitempty"`
	Highest *fence.Token `json:"highest,omitempty"`
	// Reason is a refused proof's reason (CodeInvalidProof).
	Reason string `json:"reason,omitempty"`
}

type tokenKey struct{}

// TokenFrom returns the token Middleware admitted for the request.
func TokenFrom(ctx context.Context) (fence.Token, bool) {
	tok, ok := ctx.Value(tokenKey{}).(fence.Token)
	return tok, ok
}

// KeyFromHeader returns a key function that reads the key from a request
// header. A missing or repeated header is an error.
func KeyFromHeader(name string) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		v := r.Header.Values(name)
		if len(v) != 1 || v[0] == "" {
			return "", fmt.Errorf("%w: want exactly one non-empty %s header", ErrInvalidKey, name)
		}
		return v[0], nil
	}
}

// KeyFromPathValue returns a key function that reads the key from a wildcard
// of the http.ServeMux pattern that matched the request, such as {id} in
// "PUT /items/{id}".
func KeyFromPathValue(name string) func(*http.Request) (string, error) {
	return func(r *http.Request) (string, error) {
		v := r.PathValue(name)
		if v == "" {
			return "", fmt.Errorf("%w: empty path value %q", ErrInvalidKey, name)
		}
		return v, nil
	}
}

// Middleware admits the request's Fencing-Token for the key keyFunc names
// before calling next, which finds the token with TokenFrom. When g is a
// *Signed, the Fencing-Proof header's proof is checked first, and a missing
// (where required) or bad proof is refused with 403 invalid_proof. It refuses a
// missing or malformed token with 400 malformed_token, a key keyFunc cannot
// name with 400 bad_key, a stale token with 409 stale_token, and answers 503
// guard_unavailable when the guard fails; next is not called then.
//
// The middleware is a first line of defence, not the whole of it: the check
// happens before next writes, so between the two a newer holder can be
// admitted and write, and this request's write then lands after it. For a
// write that must never follow a newer one, have the handler check and write
// in one step: File.AdmitFunc or Memory.AdmitFunc around the write, or
// SQL.AdmitTx in the transaction that writes. The middleware still pays off
// there, refusing most stale requests early with a clear answer.
func Middleware(g Guard, keyFunc func(*http.Request) (string, error), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, err := tokenFromHeader(r.Header)
		if err != nil {
			writeError(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformedToken, Message: err.Error()})
			return
		}
		key, err := keyFunc(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, ErrorBody{Code: CodeBadKey, Message: err.Error()})
			return
		}
		if err := admitRequest(r, g, key, tok); err != nil {
			writeAdmitError(w, key, tok, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, tok)))
	})
}

// admitRequest admits the request's token, with its Fencing-Proof when the
// guard checks proofs. A repeated proof header is refused as malformed.
func admitRequest(r *http.Request, g Guard, key string, tok fence.Token) error {
	s, ok := g.(*Signed)
	if !ok {
		return g.Admit(r.Context(), key, tok)
	}
	v := r.Header.Values(ProofHeaderName)
	if len(v) > 1 {
		return &ProofError{Key: key, Token: tok, Reason: "proof_malformed", Err: fmt.Errorf("%w: %d %s headers, want one", proof.ErrMalformed, len(v), ProofHeaderName)}
	}
	p := ""
	if len(v) == 1 {
		p = v[0]
	}
	return s.AdmitProof(r.Context(), key, tok, p)
}

// tokenFromHeader parses the one Fencing-Token header strictly. A repeated
// header is refused: which of two tokens a proxy would pick is anyone's guess.
func tokenFromHeader(h http.Header) (fence.Token, error) {
	v := h.Values(HeaderName)
	switch len(v) {
	case 0:
		return 0, fmt.Errorf("missing %s header", HeaderName)
	case 1:
	default:
		return 0, fmt.Errorf("%d %s headers, want one", len(v), HeaderName)
	}
	tok, err := fence.Parse(v[0])
	if err != nil {
		return 0, fmt.Errorf("%s header: %w", HeaderName, err)
	}
	return tok, nil
}

func writeAdmitError(w http.ResponseWriter, key string, tok fence.Token, err error) {
	var stale *StaleError
	var pe *ProofError
	switch {
	case errors.As(err, &pe):
		writeError(w, http.StatusForbidden, ErrorBody{Code: CodeInvalidProof, Message: err.Error(), Key: key, Token: &tok, Reason: pe.Reason})
	case errors.As(err, &stale):
		writeError(w, http.StatusConflict, ErrorBody{
			Code: CodeStaleToken, Message: err.Error(),
			Key: key, Token: &stale.Token, Highest: &stale.Highest,
		})
	case errors.Is(err, ErrInvalidKey):
		writeError(w, http.StatusBadRequest, ErrorBody{Code: CodeBadKey, Message: err.Error()})
	case errors.Is(err, ErrInvalidToken):
		writeError(w, http.StatusBadRequest, ErrorBody{Code: CodeMalformedToken, Message: err.Error(), Token: &tok})
	default:
		// Storage errors can name paths and tables: keep them out of the body.
		writeError(w, http.StatusServiceUnavailable, ErrorBody{
			Code: CodeGuardUnavailable, Message: "the fencing guard could not decide; not admitted", Key: key,
		})
	}
}

func writeError(w http.ResponseWriter, status int, body ErrorBody) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body) // the status line already went out
}
