package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/fenced/fenced/client"

	"github.com/fenced/fenced/cluster"
	"github.com/fenced/fenced/fence"
	"github.com/fenced/fenced/metrics"
)

// errUnsupportedMediaType refuses a body whose Content-Type is not JSON.
var errUnsupportedMediaType = errors.New("unsupported media type")

// checkContentType accepts a request body declared as application/json (in
// UTF-8, the only charset JSON has), or not declared at all: a form or a text
// body is most likely not meant for this API, so it is refused (415) before
// anything is read.
func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" || ct == "application/json" {
		return nil // what clients send: no parsing on the hot path
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return fmt.Errorf("%w: Content-Type %q; send application/json", errUnsupportedMediaType, ct)
	}
	for name, v := range params {
		if name != "charset" || !strings.EqualFold(v, "utf-8") {
			return fmt.Errorf("%w: Content-Type %q; JSON bodies are UTF-8", errUnsupportedMediaType, ct)
		}
	}
	return nil
}

// writeUnsupportedMediaType answers 415 for an error of checkContentType.
// It is written here rather than by writeErr, whose codes do not know it.
func writeUnsupportedMediaType(w http.ResponseWriter, err error, verify bool) {
	metrics.Refusals.WithLabelValues("unsupported_media_type").Inc()
	resp := client.ErrorResponse{Code: "unsupported_media_type", Message: err.Error()}
	if verify {
		f := false
		resp.Allow, resp.Reason = &f, string(cluster.ReasonMalformed)
	}
	writeJSON(w, http.StatusUnsupportedMediaType, resp)
}

// decode reads a strict JSON body: unknown fields, trailing data, duplicate
// fields and lone surrogate escapes are refused. Each of those would
// otherwise be read as something the sender may not have meant (the last of
// two "key" fields wins; "\ud800" becomes U+FFFD), and a key must never be
// silently changed.
func decode(body []byte, v any) error {
	// encoding/json would silently turn invalid UTF-8 into U+FFFD.
	if !utf8.Valid(body) {
		return fmt.Errorf("%w: body is not valid UTF-8", cluster.ErrBadRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON body", cluster.ErrBadRequest)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON body", cluster.ErrBadRequest)
	}
	// The body is one valid JSON value now, which the scan below relies on.
	return checkStrictJSON(body)
}

// decodeError translates an error of encoding/json to the wire's sentinels,
// in one line and without saying a sentinel's text twice.
func decodeError(err error) error {
	var ute *json.UnmarshalTypeError
	switch {
	case errors.Is(err, fence.ErrMalformed):
		return err // fence.Parse's own message: "malformed token: ..."
	case errors.As(err, &ute) && ute.Field == "token":
		return fmt.Errorf("%w: token must be decimal text in a JSON string, not a JSON %s", fence.ErrMalformed, ute.Value)
	case errors.As(err, &ute):
		return fmt.Errorf("%w: field %q must not be a JSON %s", cluster.ErrBadRequest, ute.Field, ute.Value)
	}
	return fmt.Errorf("%w: %s", cluster.ErrBadRequest, oneLine(err.Error()))
}

// oneLine keeps a message on one line.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}

// checkStrictJSON refuses, in one valid JSON value, an object with two
// members of the same name (compared without case, as encoding/json matches
// names to fields, and after unescaping) at any depth, and a \u escape of a
// UTF-16 surrogate that is not part of a pair. It scans the bytes once and,
// for the usual flat body, allocates nothing.
func checkStrictJSON(b []byte) error {
	type frame struct {
		object, expectName bool
		start              int // this object's first name in names
	}
	var stackBuf [8]frame
	var namesBuf [16][]byte
	stack, names := stackBuf[:0], namesBuf[:0]
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{', '[':
			stack = append(stack, frame{object: b[i] == '{', expectName: b[i] == '{', start: len(names)})
		case '}', ']':
			names = names[:stack[len(stack)-1].start]
			stack = stack[:len(stack)-1]
		case ',':
			if top := &stack[len(stack)-1]; top.object {
				top.expectName = true
			}
		case '"':
			end, escaped, err := scanString(b, i+1)
			if err != nil {
				return err
			}
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectName {
				name := b[i+1 : end]
				if escaped {
					var s string
					if err := json.Unmarshal(b[i:end+1], &s); err != nil {
						return fmt.Errorf("%w: %s", cluster.ErrBadRequest, oneLine(err.Error()))
					}
					name = []byte(s)
				}
				for _, seen := range names[stack[n-1].start:] {
					if bytes.EqualFold(seen, name) {
						return fmt.Errorf("%w: field %q appears twice", cluster.ErrBadRequest, name)
					}
				}
				names = append(names, name)
				stack[n-1].expectName = false
			}
			i = end
		}
	}
	return nil
}

// scanString returns the index of the quote that ends the string whose
// contents start at b[i], whether it has escapes, and an error for a lone
// surrogate escape.
func scanString(b []byte, i int) (end int, escaped bool, err error) {
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i, escaped, nil
		case '\\':
			escaped = true
			if i+1 < len(b) && b[i+1] == 'u' && i+6 <= len(b) {
				r := hex4(b[i+2 : i+6])
				switch {
				case r >= 0xD800 && r < 0xDC00: // high: a low one must follow
					if i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
						if lo := hex4(b[i+8 : i+12]); lo >= 0xDC00 && lo < 0xE000 {
							i += 11
							continue
						}
					}
					return 0, false, loneSurrogate(b[i : i+6])
				case r >= 0xDC00 && r < 0xE000:
					return 0, false, loneSurrogate(b[i : i+6])
				}
				i += 5
				continue
			}
			i++ // the escaped character; never the closing quote
		}
	}
	return 0, false, fmt.Errorf("%w: unterminated string", cluster.ErrBadRequest)
}

func loneSurrogate(esc []byte) error {
	return fmt.Errorf("%w: %s is half of a UTF-16 surrogate pair; send the character itself or both halves", cluster.ErrBadRequest, esc)
}

// hex4 reads four hex digits (valid JSON guarantees them), or returns -1.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return -1
		}
	}
	return r
}

// firstOf returns the first failed check, its message extended by those of
// the other failed checks, so one answer names every problem on one line
// (errors.Join would put each on its own line, prefix and all). errors.Is
// finds the first check's sentinel.
func firstOf(errs ...error) error {
	var first error
	var more []string
	for _, err := range errs {
		switch {
		case err == nil:
		case first == nil:
			first = err
		default:
			more = append(more, detailOf(err))
		}
	}
	if first == nil || len(more) == 0 {
		return first
	}
	return &checkErrors{first: first, msg: first.Error() + "; " + strings.Join(more, "; ")}
}

// checkErrors is what firstOf returns for more than one failed check.
type checkErrors struct {
	first error
	msg   string
}

func (e *checkErrors) Error() string { return e.msg }
func (e *checkErrors) Unwrap() error { return e.first }

// detailOf is an error's message without its sentinel's prefix.
func detailOf(err error) string {
	msg := err.Error()
	for _, s := range []error{cluster.ErrBadRequest, fence.ErrMalformed} {
		if rest, ok := strings.CutPrefix(msg, s.Error()+": "); ok {
			return rest
		}
	}
	return msg
}
