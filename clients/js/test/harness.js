// Real fenced processes for the tests: a binary built from this checkout
// (or FENCED_BIN), nodes on free loopback ports.

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, openSync, closeSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import http from 'node:http';
import https from 'node:https';
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

let builtCtl;

/** FENCECTL_BIN, or a fencectl built once from this checkout (for `fencectl tls init`). */
export function fencectlBinary() {
  if (process.env.FENCECTL_BIN) return process.env.FENCECTL_BIN;
  if (!builtCtl) {
    builtCtl = join(mkdtempSync(join(tmpdir(), 'fencectl-bin-')), 'fencectl');
    const go = process.env.GO ?? 'go';
    execFileSync(go, ['build', '-o', builtCtl, './cmd/fencectl'], {
      cwd: ROOT, stdio: 'inherit', env: { ...process.env, GOFLAGS: process.env.GOFLAGS ?? '-mod=mod', PATH: `${process.env.PATH}:/usr/local/go/bin` },
    });
  }
  return builtCtl;
}

/** A CA and the certificates of `fencectl tls init` for nodes, in a new directory the caller removes. */
export function makeTLS(nodes) {
  const dir = mkdtempSync(join(tmpdir(), 'fenced-tls-'));
  execFileSync(fencectlBinary(), ['tls', 'init', '--dir', dir, '--nodes', nodes.join(',')], { stdio: ['ignore', 'ignore', 'inherit'] });
  const pem = (...p) => readFileSync(join(dir, ...p));
  return { dir, pem };
}

/** GET url as JSON over node:http(s), with tls options (ca, cert, key). */
export function getJSON(url, { tls, timeoutMs = 500 } = {}) {
  const u = new URL(url);
  const mod = u.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = mod.get(u, { ...(tls ?? {}), signal: AbortSignal.timeout(timeoutMs) }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { body += c; });
      res.on('end', () => { try { resolve({ status: res.statusCode, body: JSON.parse(body || '{}') }); } catch (err) { reject(err); } });
      res.on('error', reject);
    });
    req.on('error', reject);
  });
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
  /** n nodes; args(node) gives a node's extra flags, probe the TLS options
   * ({ ca, cert, key }) the harness reads a node's status with (https). */
  static async start(n = 1, { args = () => [], probe } = {}) {
    const c = new Cluster();
    c.args = args;
    c.probe = probe;
    c.dir = mkdtempSync(join(tmpdir(), 'fenced-js-'));
    const addrs = await freeAddrs(2 * n);
    c.nodes = Array.from({ length: n }, (_, i) => ({ id: `n${i + 1}`, http: addrs[2 * i], raft: addrs[2 * i + 1] }));
    for (const node of c.nodes) c.startNode(node);
    await poll('a leader', () => c.leader());
    return c;
  }

  get endpoints() { return this.nodes.map((n) => (this.probe ? `https://${n.http}` : n.http)); }

  startNode(node) {
    const peers = this.nodes.map((n) => `${n.id}=${n.raft}`).join(',');
    const log = openSync(join(this.dir, `${node.id}.log`), 'a');
    node.proc = spawn(fencedBinary(), ['--id', node.id, '--data-dir', join(this.dir, node.id), '--http-addr', node.http,
      '--raft-addr', node.raft, '--peers', peers, '--heartbeat-timeout', '500ms', '--election-timeout', '500ms', ...this.args(node)],
    { stdio: ['ignore', log, log] });
    closeSync(log);
  }

  async leader() {
    for (const n of this.nodes) {
      if (n.proc.exitCode !== null || n.proc.signalCode !== null) continue;
      try {
        const { body: st } = await getJSON(`${this.probe ? 'https' : 'http'}://${n.http}/v1/cluster`, { tls: this.probe });
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

/** Events of the watch's iterator until until(events) holds; fails at the
 * deadline with what came. */
export async function collect(it, until, timeoutMs = 30000) {
  const got = [];
  const deadline = Date.now() + timeoutMs;
  while (!until(got)) {
    let timer;
    const left = deadline - Date.now();
    const r = await Promise.race([it.next(), new Promise((resolve) => { timer = setTimeout(() => resolve('timeout'), Math.max(0, left)); })]);
    clearTimeout(timer);
    if (r === 'timeout') throw new Error(`timed out waiting for watch events; got ${JSON.stringify(got)}`);
    if (r.done) throw new Error(`the watch ended after ${JSON.stringify(got)}`);
    got.push(r.value);
  }
  return got;
}
