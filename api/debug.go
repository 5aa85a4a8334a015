package api

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"sort"

	"github.com/fenced/fenced/fsm"
)

// LocalState is a node's own applied state, summarised: what GET
// /v1/debug/state answers, without forwarding and without a linearizable
// read. Comparing it across nodes shows whether they converged.
type LocalState struct {
	ID        string `json:"id"`
	Applied   uint64 `json:"applied_index"`
	Floor     uint64 `json:"epoch_floor"`
	ClusterID string `json:"cluster_id"`
	Keys      int    `json:"keys"`
	// Digest is a SHA-256 over every key's name, holder, token and state, in
	// name order: equal digests at equal applied indexes mean equal states.
	Digest string `json:"digest"`
}

// StateReader is what the debug handler needs of a node.
type StateReader interface {
	ID() string
	FSM() *fsm.FSM
}

func localState(id string, f *fsm.FSM) LocalState {
	img := f.Image()
	sort.Slice(img.Keys, func(i, j int) bool { return img.Keys[i].Key < img.Keys[j].Key })
	h := sha256.New()
	var num [8]byte
	for _, k := range img.Keys {
		h.Write([]byte(k.Key))
		h.Write([]byte{0})
		h.Write([]byte(k.Holder))
		h.Write([]byte{0, byte(k.State)})
		binary.BigEndian.PutUint64(num[:], uint64(k.Token))
		h.Write(num[:])
	}
	return LocalState{ID: id, Applied: img.Applied, Floor: img.Floor, ClusterID: img.ClusterID, Keys: len(img.Keys), Digest: hex.EncodeToString(h.Sum(nil))}
}

func (s *Server) debugState(w http.ResponseWriter, r *http.Request) {
	sr, ok := s.node.(StateReader)
	if !ok {
		writeError(w, http.StatusNotImplemented, "not_implemented", "this node cannot show its local state")
		return
	}
	writeJSON(w, http.StatusOK, localState(sr.ID(), sr.FSM()))
}
