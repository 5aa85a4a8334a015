"""Real fenced processes for the tests: a binary built from this checkout
(or FENCED_BIN), nodes on free loopback ports."""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_BIN = None


def fenced_binary():
    """FENCED_BIN, or a fenced built once from the module root."""
    global _BIN
    if os.environ.get("FENCED_BIN"):
        return os.environ["FENCED_BIN"]
    if _BIN is None:
        out = os.path.join(tempfile.mkdtemp(prefix="fenced-bin-"), "fenced")
        go = shutil.which("go") or "/usr/local/go/bin/go"
        env = dict(os.environ, GOFLAGS=os.environ.get("GOFLAGS", "-mod=mod"))
        subprocess.run([go, "build", "-o", out, "./cmd/fenced"], cwd=ROOT, check=True, env=env)
        _BIN = out
    return _BIN


_CTL = None


def fencectl_binary():
    """FENCECTL_BIN, or a fencectl built once from the module root (for
    `fencectl tls init`)."""
    global _CTL
    if os.environ.get("FENCECTL_BIN"):
        return os.environ["FENCECTL_BIN"]
    if _CTL is None:
        out = os.path.join(tempfile.mkdtemp(prefix="fencectl-bin-"), "fencectl")
        go = shutil.which("go") or "/usr/local/go/bin/go"
        env = dict(os.environ, GOFLAGS=os.environ.get("GOFLAGS", "-mod=mod"))
        subprocess.run([go, "build", "-o", out, "./cmd/fencectl"], cwd=ROOT, check=True, env=env)
        _CTL = out
    return _CTL


def make_tls(nodes):
    """A CA and the certificates of `fencectl tls init` for nodes, in a new
    directory the caller removes."""
    d = tempfile.mkdtemp(prefix="fenced-tls-")
    subprocess.run([fencectl_binary(), "tls", "init", "--dir", d, "--nodes", ",".join(nodes)], check=True,
                   stdout=subprocess.DEVNULL)
    return d


def free_addrs(n):
    socks, out = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        out.append("127.0.0.1:%d" % s.getsockname()[1])
    for s in socks:
        s.close()
    return out


def get(addr, path, timeout=2.0, ssl_context=None, headers=None):
    host, port = addr.rsplit(":", 1)
    if ssl_context is not None:
        c = http.client.HTTPSConnection(host, int(port), timeout=timeout, context=ssl_context)
    else:
        c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        c.close()


def poll(what, fn, timeout=30.0):
    """Call fn until it returns a true value or timeout passes."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - polled until the deadline
            last = e
        time.sleep(0.05)
    raise AssertionError("timed out waiting for %s (last error: %s)" % (what, last))


class Node:
    def __init__(self, cluster, i, http_addr, raft_addr):
        self.id = "n%d" % (i + 1)
        self.http = http_addr
        self.raft = raft_addr
        self.cluster = cluster
        self.dir = os.path.join(cluster.dir, self.id)
        self.proc = None

    def start(self):
        peers = ",".join("%s=%s" % (n.id, n.raft) for n in self.cluster.nodes)
        log = open(os.path.join(self.cluster.dir, self.id + ".log"), "ab")
        self.proc = subprocess.Popen(
            [fenced_binary(), "--id", self.id, "--data-dir", self.dir, "--http-addr", self.http, "--raft-addr", self.raft,
             "--peers", peers, "--heartbeat-timeout", "500ms", "--election-timeout", "500ms"] + self.cluster.args(self),
            stdout=log, stderr=log)
        log.close()

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)


class Cluster:
    """n fenced nodes bootstrapped together; stop() ends them.

    args(node) gives a node's extra flags (TLS, tokens); probe is the
    ssl_context and headers the harness reads a node's status with."""

    def __init__(self, n=1, args=None, probe_ssl=None, probe_headers=None):
        self.args = args or (lambda node: [])
        self.probe_ssl = probe_ssl
        self.probe_headers = probe_headers
        self.dir = tempfile.mkdtemp(prefix="fenced-py-")
        addrs = free_addrs(2 * n)
        self.nodes = [Node(self, i, addrs[2 * i], addrs[2 * i + 1]) for i in range(n)]
        for node in self.nodes:
            node.start()
        poll("a leader", self.leader)

    @property
    def endpoints(self):
        return [n.http for n in self.nodes]

    def leader(self):
        """The node that says it leads and is ready, or None."""
        for n in self.nodes:
            if n.proc.poll() is not None:
                continue
            try:
                status, st = get(n.http, "/v1/cluster", timeout=0.5, ssl_context=self.probe_ssl, headers=self.probe_headers)
            except OSError:
                continue
            if status == 200 and st.get("state") == "Leader" and st.get("ready"):
                return n
        return None

    def stop(self):
        for n in self.nodes:
            if n.proc and n.proc.poll() is None:
                try:
                    n.resume()
                except ProcessLookupError:
                    pass
            n.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self, tail=30):
        out = []
        for n in self.nodes:
            try:
                with open(os.path.join(self.dir, n.id + ".log"), encoding="utf-8", errors="replace") as f:
                    out.append("== %s\n%s" % (n.id, "".join(f.readlines()[-tail:])))
            except OSError:
                pass
        return "\n".join(out)
