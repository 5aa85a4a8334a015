package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/fenced/fenced/fsm"
)

// Backup is OpenBackup's backup, whole in memory, as the tests compare and
// restore it.
func (n *Node) Backup(ctx context.Context) ([]byte, BackupMeta, error) {
	b, err := n.OpenBackup(ctx, nil)
	if err != nil {
		return nil, BackupMeta{}, err
	}
	defer b.Close()
	var buf bytes.Buffer
	buf.Grow(int(b.Size))
	if _, err := b.WriteTo(&buf); err != nil {
		return nil, b.Meta, err
	}
	return buf.Bytes(), b.Meta, nil
}

// encodeBackup is the backup of an encoded image, written whole in memory:
// the layout BackupStream writes, and the reference its bytes are checked
// against. Tests also use it to craft backups, as anyone who can write a
// backup file can.
func encodeBackup(meta BackupMeta, snap []byte) ([]byte, error) {
	hdr, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(backupMagic)
	_ = binary.Write(&b, binary.BigEndian, uint32(len(hdr)))
	b.Write(hdr)
	b.Write(snap)
	sum := sha256.Sum256(b.Bytes())
	b.Write(sum[:])
	return b.Bytes(), nil
}

// backupOfImage is the backup of f's state as it was made before backups
// were streamed: the state copied into an Image, encoded, wrapped, signed.
func backupOfImage(t testing.TB, f *fsm.FSM, id string, term uint64, at time.Time, key *BackupKey) ([]byte, BackupMeta) {
	t.Helper()
	img := f.Image()
	meta := BackupMeta{ClusterID: img.ClusterID, NodeID: id, Term: term, Index: img.Applied, Keys: len(img.Keys),
		Floor: img.Floor, MaxEpoch: img.MaxEpoch(), Epoch: term + img.Floor, CreatedAt: at}
	data := imageBackup(t, meta, img)
	sum := sha256.Sum256(data[:len(data)-sha256.Size])
	meta.SHA256 = hex.EncodeToString(sum[:])
	if key != nil {
		var err error
		if data, err = SignBackup(data, key); err != nil {
			t.Fatal(err)
		}
	}
	return data, meta
}

// imageBackup is the plain backup of img under the header meta.
func imageBackup(t testing.TB, meta BackupMeta, img *fsm.Image) []byte {
	t.Helper()
	var snap bytes.Buffer
	if err := img.Encode(&snap); err != nil {
		t.Fatal(err)
	}
	data, err := encodeBackup(meta, snap.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// varied fills a state with what a backup must carry: packed and plain
// request ids, values, lock-delays, released and expired keys, a
// semaphore's permits and shared grants.
func varied(t testing.TB, keys int) *fsm.FSM {
	t.Helper()
	f := fsm.New(fsm.Config{})
	i := uint64(1)
	apply := func(c fsm.Command) {
		applyAt(f, i, 3+i/500, c)
		i++
	}
	apply(fsm.SetClusterID{ID: "c-stream"})
	for k := range keys {
		key := fmt.Sprintf("team-%d/key-%06d", k%7, k)
		holder := fmt.Sprintf("team-%d/h%d", k%7, k%13)
		a := fsm.Acquire{Key: key, Holder: holder, TTL: time.Duration(1+k%9) * time.Second}
		switch k % 6 {
		case 0:
			a.RequestID = fmt.Sprintf("%024x", k) // packed
		case 1:
			a.RequestID = fmt.Sprintf("req-%d", k)
		case 2:
			a.LockDelay = time.Duration(k%4) * time.Second
		case 3:
			a.Value = fmt.Sprintf("10.0.0.%d:7000", k%250)
		case 4:
			a.Key, a.Limit = fmt.Sprintf("sem-%d", k%5), 4
		case 5:
			a.Key, a.Shared = fmt.Sprintf("shared-%d", k%5), true
		}
		apply(a)
		s, _ := f.Get(key)
		switch {
		case k%11 == 3 && s.State == fsm.Held:
			apply(fsm.Release{Key: key, Holder: holder, Token: s.Token})
		case k%11 == 4 && s.State == fsm.Held:
			apply(fsm.Expire{Key: key, Token: s.Token, Armed: s.Armed})
		}
	}
	return f
}

// A streamed backup is, byte for byte, the backup of the state's Image,
// plain or authenticated, every time it is written; its metadata and size
// are those of those bytes, and it decodes to the state.
func TestBackupStreamWritesTheImagesBytes(t *testing.T) {
	f := varied(t, 3000)
	at := time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		key  *BackupKey
	}{{"plain", nil}, {"authenticated", testKey(t, 7)}} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantMeta := backupOfImage(t, f, "n1", 9, at, tc.key)
			b, err := openFrozen(f.Freeze(), "n1", 9, at, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if b.Meta != wantMeta || b.Size != int64(len(want)) {
				t.Fatalf("meta %+v size %d, want %+v size %d", b.Meta, b.Size, wantMeta, len(want))
			}
			for range 2 {
				var got bytes.Buffer
				if n, err := b.WriteTo(&got); err != nil || n != b.Size {
					t.Fatalf("WriteTo: %d bytes, %v", n, err)
				}
				if !bytes.Equal(got.Bytes(), want) {
					t.Fatalf("the stream's %d bytes differ from the image's %d", got.Len(), len(want))
				}
			}
			plain, _, err := CheckBackupAuth(want, tc.key, tc.key != nil)
			if err != nil {
				t.Fatal(err)
			}
			meta, img, err := DecodeBackup(plain)
			if err != nil || meta.Keys != len(img.Keys) || meta.Keys != f.Len() {
				t.Fatalf("decode: %v, %d keys in the header, %d in the image, %d in the state", err, meta.Keys, len(img.Keys), f.Len())
			}
		})
	}
}

// A backup is the state when it was opened: writes after it are not in it,
// whether they change keys, add them or delete them.
func TestBackupStreamIsThePointInTime(t *testing.T) {
	f := varied(t, 2000)
	at := time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)
	want, _ := backupOfImage(t, f, "n1", 9, at, nil)
	b, err := openFrozen(f.Freeze(), "n1", 9, at, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	next := f.Applied() + 1
	for k := range 500 {
		key := fmt.Sprintf("team-%d/key-%06d", k%7, k)
		if s, _ := f.Get(key); s.State == fsm.Held {
			applyAt(f, next, 40, fsm.Release{Key: key, Holder: s.Holder, Token: s.Token})
		} else {
			applyAt(f, next, 40, fsm.Acquire{Key: key, Holder: "later", TTL: time.Minute})
		}
		next++
		applyAt(f, next, 40, fsm.Acquire{Key: fmt.Sprintf("new/%d", k), Holder: "later", TTL: time.Minute})
		next++
	}
	var got bytes.Buffer
	if _, err := b.WriteTo(&got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatal("the backup took in writes made after it was opened")
	}
}

// A write that fails ends the backup with its error, and the backup can be
// closed twice.
func TestBackupStreamReportsAFailedWrite(t *testing.T) {
	f := varied(t, 200)
	b, err := openFrozen(f.Freeze(), "n1", 9, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	boom := errors.New("connection reset")
	if _, err := b.WriteTo(failAfter{n: 100, err: boom}); !errors.Is(err, boom) {
		t.Fatalf("got %v, want %v", err, boom)
	}
	b.Close()
}

type failAfter struct {
	n   int
	err error
}

func (w failAfter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		return w.n, w.err
	}
	return len(p), nil
}

// heapGrowth returns how much the live heap grew over fn, what fn returns
// (and so keeps) included, and what fn returned.
func heapGrowth(fn func() any) (uint64, any) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	kept := fn()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	if m1.HeapAlloc < m0.HeapAlloc {
		return 0, kept
	}
	return m1.HeapAlloc - m0.HeapAlloc, kept
}

// An open backup holds its sorted key references (and a copy of the few
// keys' extras) but not its bytes: a backup made whole in memory held at
// least its own size, and the Image it was made from while it was encoded.
func TestBackupStreamHoldsNoCopyOfTheState(t *testing.T) {
	const keys = 50_000
	f := fsm.New(fsm.Config{})
	for k := range keys {
		applyAt(f, uint64(k+1), 3, fsm.Acquire{Key: fmt.Sprintf("svc/orders/shard-%07d", k), Holder: fmt.Sprintf("worker-%04d", k%1000),
			TTL: 10 * time.Second, RequestID: fmt.Sprintf("%024x", k)})
	}
	n := uint64(f.Len())
	held, kept := heapGrowth(func() any {
		b, err := openFrozen(f.Freeze(), "n1", 9, time.Now(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
	b := kept.(*BackupStream)
	defer b.Close()
	size := uint64(b.Size)
	t.Logf("an open backup holds %d bytes a key; the backup is %d bytes a key", held/n, size/n)
	if held > size/2 {
		t.Fatalf("an open backup holds %d bytes, more than half its %d bytes", held, size)
	}
}
