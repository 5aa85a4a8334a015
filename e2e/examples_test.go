// The worked examples (their own module, examples/), run against a real
// cluster.
package e2e_test

import (
	"bufio"
	"database/sql"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/fenced/fenced/internal/proccluster"
)

func build(t *testing.T, pkg string) string {
	t.Helper()
	root, err := proccluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = filepath.Join(root, "examples")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, msg)
	}
	return out
}

func startCluster(t *testing.T) *proccluster.Cluster {
	t.Helper()
	return proccluster.StartTest(t, proccluster.Options{Nodes: 3})
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// kleppmann plays Kleppmann's scenario: holder A acquires, reads the stock
// and checks its lease, then freezes (SIGSTOP) past its TTL; B acquires and
// reserves the last item; A wakes up and writes what it decided before the
// pause. It returns A's exit code and output, and the reservations made.
func kleppmann(t *testing.T, c *proccluster.Cluster, bin string, extra ...string) (int, string, []string) {
	db := filepath.Join(t.TempDir(), "stock.db")
	eps := "--endpoints=" + strings.Join(c.Endpoints(), ",")
	if out, err := exec.Command(bin, "--db", db, "--init", "1").CombinedOutput(); err != nil {
		t.Fatalf("init: %v %s", err, out)
	}
	a := exec.Command(bin, append([]string{eps, "--db", db, "--holder", "A", "--ttl", "1s", "--wait-for-go"}, extra...)...)
	stdin, _ := a.StdinPipe()
	stdout, _ := a.StdoutPipe()
	a.Stderr = os.Stderr
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer a.Process.Kill()
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && lines.Text() != "lease checked" {
	}
	if err := a.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := proccluster.WaitStopped(a.Process.Pid, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil { // read once A wakes
		t.Fatal(err)
	}
	bOut, err := exec.Command(bin, eps, "--db", db, "--holder", "B", "--ttl", "10s", "--wait", "30s").CombinedOutput()
	if err != nil || !strings.Contains(string(bOut), "reserved widget for B") {
		t.Fatalf("B: %v\n%s", err, bOut)
	}
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stdout)
	code := exitCode(a.Wait())

	sdb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	rows, err := sdb.Query(`SELECT holder FROM reservations ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var who []string
	for rows.Next() {
		var h string
		_ = rows.Scan(&h)
		who = append(who, h)
	}
	return code, string(rest), who
}

// With the fence, A is refused by the database and the data holds B's write.
func TestStockKleppmannScenario(t *testing.T) {
	c := startCluster(t)
	bin := build(t, "./stock")
	code, out, who := kleppmann(t, c, bin)
	if code != 3 || !strings.Contains(out, "refused") {
		t.Fatalf("A after waking: exit %d, output %q: the stale holder was not refused", code, out)
	}
	if len(who) != 1 || who[0] != "B" {
		t.Fatalf("reservations %v, want only B's", who)
	}
}

// The positive control: without the fence the same schedule sells the last
// item twice, so the test above can tell fencing from luck.
func TestStockWithoutFenceOversells(t *testing.T) {
	c := startCluster(t)
	bin := build(t, "./stock")
	code, _, who := kleppmann(t, c, bin, "--no-fence")
	if code != 0 || len(who) != 2 {
		t.Fatalf("without a fence: exit %d, reservations %v; want A's stale write to go through", code, who)
	}
}

// The file writer: each holder's write goes through the durable guard; a
// write with a superseded token is refused and leaves the file unchanged.
func TestFileWriter(t *testing.T) {
	c := startCluster(t)
	bin := build(t, "./filewriter")
	dir := t.TempDir()
	eps := "--endpoints=" + strings.Join(c.Endpoints(), ",")
	run := func(args ...string) (string, int) {
		out, err := exec.Command(bin, append([]string{eps, "--dir", dir}, args...)...).CombinedOutput()
		return string(out), exitCode(err)
	}
	out1, code := run("--holder", "alice", "--line", "from alice")
	if code != 0 {
		t.Fatalf("alice: %d %s", code, out1)
	}
	out2, code := run("--holder", "bob", "--line", "from bob")
	if code != 0 {
		t.Fatalf("bob: %d %s", code, out2)
	}
	aliceTok := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out1), "wrote with token"))
	out3, code := run("--token", aliceTok, "--line", "stale alice")
	if code != 3 || !strings.Contains(out3, "refused") {
		t.Fatalf("stale write: %d %s", code, out3)
	}
	data, err := os.ReadFile(filepath.Join(dir, "journal.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "from alice\nfrom bob\n" {
		t.Fatalf("journal: %q", data)
	}
}

// The deploy script runs its command under the lock with the token verified;
// a second deploy waits for the first; a token that is no longer current stops
// a deploy before its command runs.
func TestDeployScript(t *testing.T) {
	c := startCluster(t)
	_, ctl, err := proccluster.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := proccluster.ModuleRoot()
	script := filepath.Join(root, "examples", "deploy", "deploy.sh")
	env := append(os.Environ(), "FENCECTL="+ctl, "FENCE_ENDPOINTS="+strings.Join(c.Endpoints(), ","))
	out := filepath.Join(t.TempDir(), "deployed")
	cmd := exec.Command(script, "prod", "sh", "-c", `echo "$FENCE_TOKEN" >> `+out)
	cmd.Env = env
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy: %v\n%s", err, msg)
	}
	first, _ := os.ReadFile(out)
	if !strings.Contains(string(first), "\n") {
		t.Fatalf("the deploy command did not run: %q", first)
	}
	// A deploy whose grant is superseded before its verify does not run its
	// command: an operator force-releases the key while the prelude runs.
	stale := exec.Command(ctl, "lock", "deploy/stale", "--ttl", "15s", "--", "sh", "-c",
		`"$FENCECTL" release --force "$FENCE_KEY" >/dev/null && "$FENCECTL" verify "$FENCE_KEY" "$FENCE_TOKEN" || exit 75; echo ran >> `+out)
	stale.Env = env
	msg, err := stale.CombinedOutput()
	// Either the verify refuses (75) or fencectl lock notices the lost lease
	// first and kills the command (4): never does the command run.
	if code := exitCode(err); code != 75 && code != 4 {
		t.Fatalf("stale deploy: exit %d\n%s", code, msg)
	}
	after, _ := os.ReadFile(out)
	if strings.Contains(string(after), "ran") {
		t.Fatal("a deploy with a superseded token ran its command")
	}
}
