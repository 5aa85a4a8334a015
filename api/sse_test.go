package api

import (
	"bufio"
	"io"
	"strings"
)

// readSSE calls fn with each event of a server-sent event stream as the
// server wrote it, until fn or the stream returns an error. It is the
// tests' own reader, plain on purpose: it checks what the server writes,
// not the client module's reader.
func readSSE(r io.Reader, fn func(id, name string, data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var id, name string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if len(data) > 0 {
				if err := fn(id, name, []byte(strings.Join(data, "\n"))); err != nil {
					return err
				}
			}
			id, name, data = "", "", nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "event":
			name = value
		case "data":
			data = append(data, value)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}
