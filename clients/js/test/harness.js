// Real fenced processes for the tests: a binary built from this checkout
// (or FENCED_BIN), nodes on free loopback ports.

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, openSync, closeSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
let built;

export function fencedBinary() {
  if (process.env.FENCED_BIN) return process.env.FENCED_BIN;
  if (!built) {
    built = join(mkdtempSync(join(tmpdir(), 'fenced-bin-')), 'fenced');
    const go = process.env.GO ?? (process.env.PATH.split(':').some(Boolean) ? 'go' : '/usr/local/go/bin/go');
    execFileSync(go, ['build', '-o', built, './cmd/fenced'], {
      cwd: ROOT, stdio: 'inherit', env: { ...process.env, GOFLAGS: process.env.GOFLAGS ?? '-mod=mod', PATH: `${process.env.PATH}:/usr/local/go/bin` },
    });
  }
  return built;
}

async function freeAddrs(n) {
  const servers = [];
  for (let i = 0; i < n; i++) {
    const s = createServer();
    await new Promise((r) => s.listen(0, '127.0.0.1', r));
    servers.push(s);
  }
  const out = servers.map((s) => `127.0.0.1:${s.address().port}`);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return out;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Calls fn until it returns a truthy value or timeoutMs passes. */
export async function poll(what, fn, timeoutMs = 30000) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) { last = err; }
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what} (last error: ${last?.message})`);
}

export class Cluster {
  static async start(n = 1) {
    const c = new Cluster();
    c.dir = mkdtempSync(join(tmpdir(), 'fenced-js-'));
    const addrs = await freeAddrs(2 * n);
    c.nodes = Array.from({ length: n }, (_, i) => ({ id: `n${i + 1}`, http: addrs[2 * i], raft: addrs[2 * i + 1] }));
    for (const node of c.nodes) c.startNode(node);
    await poll('a leader', () => c.leader());
    return c;
  }

  get endpoints() { return this.nodes.map((n) => n.http); }

  startNode(node) {
    const peers = this.nodes.map((n) => `${n.id}=${n.raft}`).join(',');
    const log = openSync(join(this.dir, `${node.id}.log`), 'a');
    node.proc = spawn(fencedBinary(), ['--id', node.id, '--data-dir', join(this.dir, node.id), '--http-addr', node.http,
      '--raft-addr', node.raft, '--peers', peers, '--heartbeat-timeout', '500ms', '--election-timeout', '500ms'],
    { stdio: ['ignore', log, log] });
    closeSync(log);
  }

  async leader() {
    for (const n of this.nodes) {
      if (n.proc.exitCode !== null || n.proc.signalCode !== null) continue;
      try {
        const r = await fetch(`http://${n.http}/v1/cluster`, { signal: AbortSignal.timeout(500) });
        const st = await r.json();
        if (st.state === 'Leader' && st.ready) return n;
      } catch { /* down or frozen */ }
    }
    return null;
  }

  logs() {
    return this.nodes.map((n) => {
      try { return `== ${n.id}\n${readFileSync(join(this.dir, `${n.id}.log`), 'utf8').split('\n').slice(-30).join('\n')}`; } catch { return ''; }
    }).join('\n');
  }

  stop() {
    for (const n of this.nodes) {
      try { n.proc.kill('SIGCONT'); } catch { /* gone */ }
      try { n.proc.kill('SIGKILL'); } catch { /* gone */ }
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Whether process pid is stopped (SIGSTOP delivered). */
export function stopped(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0] === 'T';
}
