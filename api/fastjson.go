package api

import (
	"encoding/json"
	"strconv"
	"sync"

	"github.com/fenced/fenced/client"
)

// The answers of verify and keepalive, the requests a client sends most,
// encode themselves by appending, and their request bodies have a fast
// path, both without reflection. Each gives exactly what encoding/json
// gives for the same value, and leaves everything else to it.

// jsonAppender is an answer that appends its JSON to b, byte for byte what
// json.Encoder (which escapes HTML) writes for it, without the newline.
type jsonAppender interface{ appendJSON(b []byte) []byte }

// The answers with a fast encoding: the wire types are the client module's,
// so their encoders hang off local types of the same layout.
type (
	verifyAnswer    client.VerifyResponse
	keepaliveAnswer client.KeepaliveResponse
	renewAnswer     client.RenewResponse
)

// appendAnswer appends v's JSON to b when v is an answer with a fast
// encoding; ok is false otherwise, and b is unchanged.
func appendAnswer(b []byte, v any) (_ []byte, ok bool) {
	switch v := v.(type) {
	case client.VerifyResponse:
		return verifyAnswer(v).appendJSON(b), true
	case client.KeepaliveResponse:
		return keepaliveAnswer(v).appendJSON(b), true
	case client.RenewResponse:
		return renewAnswer(v).appendJSON(b), true
	}
	return b, false
}

// answerBufs holds the buffers answers are encoded in; one that grew past
// maxPooledAnswer (a keepalive of many keys) is left to the collector.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

const maxPooledAnswer = 16 << 10

func (v verifyAnswer) appendJSON(b []byte) []byte {
	b = append(b, `{"allow":`...)
	b = strconv.AppendBool(b, v.Allow)
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, v.Reason)
	if v.CurrentToken != 0 {
		b = append(b, `,"current_token":"`...)
		b = strconv.AppendUint(b, uint64(v.CurrentToken), 10)
		b = append(b, '"')
	}
	if v.Holder != "" {
		b = append(b, `,"holder":`...)
		b = appendJSONString(b, v.Holder)
	}
	return append(b, '}')
}

func (v keepaliveAnswer) appendJSON(b []byte) []byte {
	b = append(b, `{"holder":`...)
	b = appendJSONString(b, v.Holder)
	b = append(b, `,"renewed":`...)
	if v.Renewed == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, r := range v.Renewed {
			if i > 0 {
				b = append(b, ',')
			}
			b = renewAnswer(r).appendJSON(b)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func (v renewAnswer) appendJSON(b []byte) []byte {
	b = append(b, `{"key":`...)
	b = appendJSONString(b, v.Key)
	b = append(b, `,"holder":`...)
	b = appendJSONString(b, v.Holder)
	b = append(b, `,"token":"`...)
	b = strconv.AppendUint(b, uint64(v.Token), 10)
	b = append(b, `","ttl":`...)
	b = appendJSONString(b, v.TTL)
	if v.Proof != "" {
		b = append(b, `,"proof":`...)
		b = appendJSONString(b, v.Proof)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string. Printable ASCII that neither
// JSON nor HTML escaping touches is copied; anything else (control
// characters, quotes, <, >, &, non-ASCII, invalid UTF-8) goes through
// encoding/json, so the result is always its own.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// decodeFlatStrings is the fast path of decode for a body that is one flat
// JSON object whose members are all among names (exactly as spelled),
// each at most once, with string values of printable ASCII without
// escapes; it stores the values in dst (dst[i] for names[i]) and reports
// true. For anything else it stores nothing and reports false, and decode
// decides: every body this accepts, decode accepts with the same values.
func decodeFlatStrings(body []byte, names []string, dst []*string) bool {
	var vals [4]string
	var seen [4]bool
	if len(names) > len(vals) {
		return false
	}
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return skipSpace(body, i+1) == len(body)
	}
	for {
		name, j, ok := plainString(body, i)
		if !ok {
			return false
		}
		f := -1
		for k, n := range names {
			if n == string(name) {
				f = k
				break
			}
		}
		if f < 0 || seen[f] {
			return false
		}
		i = skipSpace(body, j)
		if i >= len(body) || body[i] != ':' {
			return false
		}
		val, j, ok := plainString(body, skipSpace(body, i+1))
		if !ok {
			return false
		}
		vals[f], seen[f] = string(val), true
		i = skipSpace(body, j)
		if i >= len(body) {
			return false
		}
		if body[i] == '}' {
			break
		}
		if body[i] != ',' {
			return false
		}
		i = skipSpace(body, i+1)
	}
	if skipSpace(body, i+1) != len(body) {
		return false
	}
	for k := range names {
		if seen[k] {
			*dst[k] = vals[k]
		}
	}
	return true
}

// plainString reads the JSON string at data[i] if it holds only printable
// ASCII without escapes, and returns its content and the index after its
// closing quote. The fast path of decode takes only such strings and leaves
// the rest to encoding/json. (The Go client's watch event decoder has its
// own copy: the two modules share no code beyond the wire types.)
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
