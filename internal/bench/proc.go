package bench

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrNoProc is returned where /proc cannot tell a process's CPU time or
// which process listens on an address (not Linux, or not our process).
var ErrNoProc = errors.New("bench: process CPU times need Linux's /proc")

// clockTick is the unit of utime and stime in /proc/PID/stat: USER_HZ,
// which Linux fixes at 100 for every architecture Go runs on.
const clockTick = 10 * time.Millisecond

// ProcessesCPU returns the CPU time (user and system) the processes pids
// have used so far, summed, from /proc/PID/stat. Its resolution is 10 ms per
// process, which is why a run's figure is divided by thousands of operations.
func ProcessesCPU(pids []int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		t, err := processCPU(pid)
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoProc, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields that follow start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: /proc/%d/stat: no command name", ErrNoProc, pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("%w: /proc/%d/stat: %d fields", ErrNoProc, pid, len(f)+2)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: /proc/%d/stat: utime %q stime %q", ErrNoProc, pid, f[11], f[12])
	}
	return time.Duration(ut+st) * clockTick, nil
}

// ListeningPIDs returns the processes on this machine that listen on the
// TCP ports of addrs (host:port), found through /proc/net/tcp and the
// sockets in /proc/PID/fd. Only addresses of this machine are looked up:
// loopback ones and those of its own interfaces; others are skipped. Only
// processes this user may inspect are found.
func ListeningPIDs(addrs []string) []int {
	ports := map[string]bool{}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || !isLocal(host) {
			continue
		}
		if p, err := strconv.ParseUint(port, 10, 16); err == nil {
			ports[fmt.Sprintf("%04X", p)] = true
		}
	}
	if len(ports) == 0 {
		return nil
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listeningInodes(f, ports, inodes)
	}
	if len(inodes) == 0 {
		return nil
	}
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(d, fd.Name()))
			if err == nil && strings.HasPrefix(link, "socket:[") && inodes[strings.TrimSuffix(link[len("socket:["):], "]")] {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// listeningInodes adds the socket inodes of the listening sockets of a
// /proc/net/tcp file whose local port (hex) is in ports.
func listeningInodes(path string, ports, inodes map[string]bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "0A" { // 0A: LISTEN
			continue
		}
		if i := strings.LastIndexByte(f[1], ':'); i >= 0 && ports[f[1][i+1:]] {
			inodes[f[9]] = true
		}
	}
}

// isLocal reports whether host names this machine.
func isLocal(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// ProcessRSS returns the resident set size of process pid, from the VmRSS
// line of /proc/PID/status.
func ProcessRSS(pid int) (uint64, error) { return procStatusBytes(pid, "VmRSS") }

// ProcessPeakRSS returns the largest resident set size a process has had
// (VmHWM, Linux); an error wrapping ErrNoProc elsewhere.
func ProcessPeakRSS(pid int) (uint64, error) { return procStatusBytes(pid, "VmHWM") }

// procStatusBytes reads a field in kB from /proc/PID/status, in bytes.
func procStatusBytes(pid int, field string) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrNoProc, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: /proc/%d/status: %s %q", ErrNoProc, pid, field, v)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%w: /proc/%d/status: no %s", ErrNoProc, pid, field)
}
