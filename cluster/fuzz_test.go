package cluster

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fenced/fenced/fsm"
)

// backupSeed is a valid backup of a small state.
func backupSeed(tb testing.TB) []byte {
	f := fsm.New(fsm.Config{})
	for i, c := range []fsm.Command{
		fsm.SetClusterID{ID: "c1"},
		fsm.SetMember{ID: "n1", HTTPAddr: "127.0.0.1:7700"},
		fsm.Acquire{Key: "k", Holder: "h", TTL: time.Second},
	} {
		f.Apply(&raft.Log{Index: uint64(i + 1), Term: 2, Type: raft.LogCommand, Data: fsm.Encode(c)})
	}
	img := f.Image()
	img.Floor = 3 // as a restore raised it
	return imageBackup(tb, BackupMeta{ClusterID: "c1", NodeID: "n1", Term: 2, Index: img.Applied, Keys: len(img.Keys), Floor: img.Floor, MaxEpoch: img.MaxEpoch(), Epoch: 5}, img)
}

// FuzzDecodeBackup feeds arbitrary bytes to DecodeBackup, which a restore
// calls before it touches anything: it must never panic, must refuse with
// ErrBadBackup, and what it accepts must encode back to the same image. With
// seal set, the input gets a valid checksum appended, so that the fuzzer
// reaches the header and image decoders behind the checksum.
func FuzzDecodeBackup(f *testing.F) {
	good := backupSeed(f)
	f.Add(good, false)
	f.Add(good[:len(good)-sha256.Size], true)
	f.Add(good[:len(good)-1], false)
	f.Add([]byte(backupMagic), true)
	f.Add(append([]byte(backupMagic), 0xff, 0xff, 0xff, 0xff), true)
	if k, err := NewBackupKey(bytes.Repeat([]byte{1}, MinBackupKeyLen)); err == nil {
		signed, _ := SignBackup(good, k)
		f.Add(signed, false)
	}
	f.Fuzz(func(t *testing.T, data []byte, seal bool) {
		if seal {
			sum := sha256.Sum256(data)
			data = append(data[:len(data):len(data)], sum[:]...)
		}
		meta, img, err := DecodeBackup(data)
		if bytes.Equal(data, good) && err != nil {
			t.Fatalf("the seed backup is refused: %v", err)
		}
		if err != nil {
			if !errors.Is(err, ErrBadBackup) {
				t.Fatalf("refusal %v is not ErrBadBackup", err)
			}
			if img != nil {
				t.Fatal("a refused backup returned an image")
			}
			return
		}
		var snap bytes.Buffer
		if err := img.Encode(&snap); err != nil {
			t.Fatalf("accepted image does not encode: %v", err)
		}
		again, err := fsm.DecodeImage(snap.Bytes())
		if err != nil || !reflect.DeepEqual(again, img) {
			t.Fatalf("accepted image does not round-trip: %v", err)
		}
		if meta.SHA256 == "" {
			t.Fatal("accepted backup has no checksum")
		}
	})
}
