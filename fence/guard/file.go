package guard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fenced/fenced/fence"
)

// ErrClosed is returned by a File guard after Close.
var ErrClosed = errors.New("guard closed")

// maxPlainKey is the longest key stored under its own hex-encoded name. Longer
// keys are stored under the hex SHA-256 of the key, so that every file name
// (plus a suffix) stays under the 255-byte limit of common file systems.
const maxPlainKey = 100

// File is a durable Guard that keeps one small file per key in a directory.
//
// A new highest token is written to a temporary file, fsynced, renamed over the
// key's file and the directory is fsynced, all before Admit returns nil: once a
// token has been admitted, no crash or power loss can bring back a lower
// highest, so a lower token can never be admitted later.
//
// Admissions of one key are serialized inside the process by a lock per key,
// and across processes by an flock(2) on a lock file per key, so several
// processes (running as the same user) may share the directory. Keys are never
// forgotten: the files stay in the directory for good.
//
// File names are derived from the key ("k" and the hex of the key, or "h" and
// the hex SHA-256 of keys longer than 100 bytes), so any key, including one
// with slashes, dots or NUL bytes, stays inside the directory, and names differ
// by more than case.
type File struct {
	dir  string
	dirf *os.File // kept open to fsync the directory after each rename

	closed atomic.Bool

	// flock takes the cross-process lock; tests replace it to show that the
	// checker notices when it is missing.
	flock func(context.Context, *os.File) error

	mu      sync.Mutex
	locks   map[string]*fileKeyLock // keys being admitted in this process
	durable map[string]fence.Token  // highest known to be on stable storage, per key admitted here
}

// fileKeyLock is a per-key lock, counted so it can be dropped when idle and the
// map does not grow with every key ever seen.
type fileKeyLock struct {
	lock keyLock
	refs int // guarded by File.mu
}

var _ Guard = (*File)(nil)

// OpenFile opens (creating it if needed, with mode 0700) a directory of
// durable fences. Close it when done.
func OpenFile(dir string) (*File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	// A directory just created is durable only once its parent is synced;
	// otherwise a power loss could take every record with it.
	if err := syncPath(filepath.Dir(filepath.Clean(dir))); err != nil {
		return nil, err
	}
	dirf, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	return &File{
		dir:     dir,
		dirf:    dirf,
		locks:   make(map[string]*fileKeyLock),
		durable: make(map[string]fence.Token),
		flock:   flock,
	}, nil
}

// Close releases the directory; later calls return ErrClosed. Call it once no
// admission is in flight.
func (f *File) Close() error {
	if f.closed.Swap(true) {
		return ErrClosed
	}
	return f.dirf.Close()
}

// Admit implements Guard.
func (f *File) Admit(ctx context.Context, key string, tok fence.Token) error {
	return f.AdmitFunc(ctx, key, tok, nil)
}

// AdmitFunc admits tok for key like Admit and then, still holding the key's
// lock in this process and its flock, runs write (when it is not nil). No other
// admission of the key through a File guard on the same directory can run
// between the check and the write.
//
// The order is: check, record durably, write. It is the safe order for crashes:
// a crash after the record and before the write leaves a highest that no write
// carried, which only refuses stale holders sooner. The opposite order would
// let a crash leave a newer holder's write behind a lower highest, and a stale
// holder could then write over it. For the same reason a token recorded before
// a failing write stays recorded (the failed write may have partly happened);
// write's error is returned unchanged.
func (f *File) AdmitFunc(ctx context.Context, key string, tok fence.Token, write func() error) error {
	if err := checkAdmit(ctx, key, tok); err != nil {
		return err
	}
	if f.closed.Load() {
		return ErrClosed
	}
	name := fileName(key)
	unlock, err := f.lockKey(ctx, key, name)
	if err != nil {
		return err
	}
	defer unlock()
	if err := f.record(key, name, tok); err != nil {
		return err
	}
	if write == nil {
		return nil
	}
	return write()
}

// record compares tok with the key's highest and makes tok the durable
// highest, or refuses it. The caller holds the key's locks.
func (f *File) record(key, name string, tok fence.Token) error {
	cur, err := f.read(name)
	if err != nil {
		return err // fail closed: an unreadable record admits nothing
	}
	if tok < cur {
		return &StaleError{Key: key, Token: tok, Highest: cur}
	}
	if tok > cur {
		err = f.store(name, tok)
	} else {
		err = f.syncEqual(key, name, cur)
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.durable[key] = tok
	f.mu.Unlock()
	return nil
}

// Highest implements Guard. It reads the key's file without locking: renames
// are atomic, so it sees either the old or the new highest.
func (f *File) Highest(ctx context.Context, key string) (fence.Token, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if f.closed.Load() {
		return 0, ErrClosed
	}
	return f.read(fileName(key))
}

// fileName maps a key to a file name that is safe on any file system.
func fileName(key string) string {
	if len(key) <= maxPlainKey {
		return "k" + hex.EncodeToString([]byte(key))
	}
	sum := sha256.Sum256([]byte(key))
	return "h" + hex.EncodeToString(sum[:])
}

// read returns the token stored in a key's file, or zero when there is none.
// Anything but the exact record store writes is an error, never a guess.
func (f *File) read(name string) (fence.Token, error) {
	path := filepath.Join(f.dir, name)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("guard: %w", err)
	}
	text, ok := strings.CutSuffix(string(b), "\n")
	if !ok {
		return 0, fmt.Errorf("guard: corrupt fence record %s: no final newline", path)
	}
	tok, err := fence.Parse(text)
	if err != nil {
		return 0, fmt.Errorf("guard: corrupt fence record %s: %w", path, err)
	}
	return tok, nil
}

// store makes tok the content of the key's file, durably: write a temporary
// file, fsync it, rename it over the old file, fsync the directory. Only the
// holder of the key's flock writes the temporary file, so its fixed name is
// safe, and a leftover from a crash is simply truncated next time.
func (f *File) store(name string, tok fence.Token) error {
	tmp := filepath.Join(f.dir, name+".tmp")
	fh, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	_, err = fh.WriteString(tok.String() + "\n")
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("guard: write fence record: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, name)); err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	return f.syncDir()
}

// syncEqual makes sure an equal token is admitted only against a durable
// record. The visible record may have been renamed into place by a process
// that crashed before fsyncing the directory; unless this guard has itself
// seen that value on stable storage, it fsyncs the file and the directory.
func (f *File) syncEqual(key, name string, cur fence.Token) error {
	f.mu.Lock()
	known := f.durable[key] == cur
	f.mu.Unlock()
	if known {
		return nil
	}
	if err := syncPath(filepath.Join(f.dir, name)); err != nil {
		return err
	}
	return f.syncDir()
}

// syncPath fsyncs a file or directory by name.
func syncPath(path string) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	err = fh.Sync()
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("guard: sync %s: %w", path, err)
	}
	return nil
}

func (f *File) syncDir() error {
	if err := f.dirf.Sync(); err != nil {
		return fmt.Errorf("guard: sync directory: %w", err)
	}
	return nil
}

// lockKey takes the key's lock in this process, then its flock, and returns
// the function that releases both.
func (f *File) lockKey(ctx context.Context, key, name string) (func(), error) {
	f.mu.Lock()
	l := f.locks[key]
	if l == nil {
		l = &fileKeyLock{lock: newKeyLock()}
		f.locks[key] = l
	}
	l.refs++
	f.mu.Unlock()

	release := func() {
		f.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(f.locks, key)
		}
		f.mu.Unlock()
	}
	if err := l.lock.lock(ctx); err != nil {
		release()
		return nil, err
	}
	// The lock file is separate from the record because the record is replaced
	// by rename, and a lock on a replaced inode would protect nothing.
	lf, err := os.OpenFile(filepath.Join(f.dir, name+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err == nil {
		if err = f.flock(ctx, lf); err != nil {
			lf.Close()
		}
	}
	if err != nil {
		l.lock.unlock()
		release()
		return nil, fmt.Errorf("guard: lock %q: %w", key, err)
	}
	return func() {
		lf.Close() // closing the last descriptor drops the flock
		l.lock.unlock()
		release()
	}, nil
}
