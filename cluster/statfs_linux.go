package cluster

import "syscall"

// statFS returns the bytes available to this process and the total bytes of
// the file system holding dir.
func statFS(dir string) (free, total uint64, err error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return 0, 0, err
	}
	return s.Bavail * uint64(s.Bsize), s.Blocks * uint64(s.Bsize), nil
}
