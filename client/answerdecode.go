package client

import "github.com/fenced/fenced/fence"

// decodeAnswer decodes a verify's or a keepalive's answer into out (a
// *VerifyResponse or *KeepaliveResponse holding its zero value) exactly as
// encoding/json would, without reflection, when the answer is in the flat
// form servers send: the known fields in any order, plain ASCII strings,
// tokens as decimal strings. It reports false, leaving out untouched, for
// anything else (escapes, non-ASCII text, unknown or differently cased
// fields, numbers where strings belong, white space inside), which
// encoding/json then decides. These are the answers a busy client decodes
// most: encoding/json took about a seventh of the Go client's CPU per
// keepalive.
func decodeAnswer(data []byte, out any) bool {
	switch out := out.(type) {
	case *VerifyResponse:
		var v VerifyResponse
		if *out != v || !wholeObject(data, func(name []byte, i int) (int, bool) { return v.field(data, name, i) }) {
			return false
		}
		*out = v
		return true
	case *KeepaliveResponse:
		var v KeepaliveResponse
		// A second "renewed" would be decoded by encoding/json into the
		// elements of the first: left to it.
		seen := false
		field := func(name []byte, i int) (int, bool) {
			if string(name) == "renewed" {
				if seen {
					return 0, false
				}
				seen = true
			}
			return v.field(data, name, i)
		}
		if out.Holder != "" || out.Renewed != nil || !wholeObject(data, field) {
			return false
		}
		*out = v
		return true
	}
	return false
}

// field decodes the value of the verify answer's field name at data[i].
func (v *VerifyResponse) field(data, name []byte, i int) (int, bool) {
	switch string(name) {
	case "allow":
		switch {
		case hasAt(data, i, "true"):
			v.Allow = true
			return i + 4, true
		case hasAt(data, i, "false"):
			v.Allow = false
			return i + 5, true
		}
		return 0, false
	case "reason":
		s, j, ok := plainString(data, i)
		if ok {
			v.Reason = eventName(s)
		}
		return j, ok
	case "current_token":
		return tokenAt(data, i, &v.CurrentToken)
	case "holder":
		return stringAt(data, i, &v.Holder)
	}
	return 0, false
}

// field decodes the value of the keepalive answer's field name at data[i].
func (v *KeepaliveResponse) field(data, name []byte, i int) (int, bool) {
	switch string(name) {
	case "holder":
		return stringAt(data, i, &v.Holder)
	case "renewed":
		if hasAt(data, i, "null") {
			v.Renewed = nil
			return i + 4, true
		}
		return renewedAt(data, i, &v.Renewed)
	}
	return 0, false
}

// renewedAt decodes the array of renewals at data[i] into *out.
func renewedAt(data []byte, i int, out *[]RenewResponse) (int, bool) {
	if i >= len(data) || data[i] != '[' {
		return 0, false
	}
	rs := []RenewResponse{}
	i++
	if i < len(data) && data[i] == ']' {
		*out = rs
		return i + 1, true
	}
	for {
		var r RenewResponse
		j, ok := objectAt(data, i, func(name []byte, k int) (int, bool) { return r.field(data, name, k) })
		if !ok || j >= len(data) {
			return 0, false
		}
		rs = append(rs, r)
		switch data[j] {
		case ',':
			i = j + 1
		case ']':
			*out = rs
			return j + 1, true
		default:
			return 0, false
		}
	}
}

// field decodes the value of a renewal's field name at data[i].
func (r *RenewResponse) field(data, name []byte, i int) (int, bool) {
	switch string(name) {
	case "token":
		return tokenAt(data, i, &r.Token)
	case "key":
		return stringAt(data, i, &r.Key)
	case "holder":
		return stringAt(data, i, &r.Holder)
	case "ttl":
		return stringAt(data, i, &r.TTL)
	case "proof":
		return stringAt(data, i, &r.Proof)
	}
	return 0, false
}

// stringAt decodes the plain string at data[i] into *s.
func stringAt(data []byte, i int, s *string) (int, bool) {
	v, j, ok := plainString(data, i)
	if ok {
		*s = string(v)
	}
	return j, ok
}

// tokenAt decodes the token at data[i], a decimal string, into *t.
func tokenAt(data []byte, i int, t *fence.Token) (int, bool) {
	s, j, ok := plainString(data, i)
	if !ok {
		return 0, false
	}
	v, err := fence.Parse(string(s))
	if err != nil {
		return 0, false
	}
	*t = v
	return j, true
}

// wholeObject walks the object that is the whole of data (white space may
// follow it), handing each field's name and the index of its value to
// field, which returns the index after the value.
func wholeObject(data []byte, field func(name []byte, i int) (int, bool)) bool {
	j, ok := objectAt(data, 0, field)
	if !ok {
		return false
	}
	for ; j < len(data); j++ {
		if c := data[j]; c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// objectAt walks the object at data[i] without white space inside and
// returns the index after it.
func objectAt(data []byte, i int, field func(name []byte, i int) (int, bool)) (int, bool) {
	if i+1 >= len(data) || data[i] != '{' {
		return 0, false
	}
	i++
	if data[i] == '}' {
		return i + 1, true
	}
	for {
		name, j, ok := plainString(data, i)
		if !ok || j >= len(data) || data[j] != ':' {
			return 0, false
		}
		if i, ok = field(name, j+1); !ok || i >= len(data) {
			return 0, false
		}
		switch data[i] {
		case ',':
			i++
		case '}':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// hasAt reports whether data holds lit at i.
func hasAt(data []byte, i int, lit string) bool {
	return len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit
}
