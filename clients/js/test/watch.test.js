import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { FencedClient, FencingToken } from '../src/index.js';
import { Cluster, collect, getJSON, poll } from './harness.js';
import { sseProxy } from './sse-proxy.js';

const CHANGES = new Set(['granted', 'renewed', 'released', 'force_released', 'expired', 'lock_delay_ended', 'handed_off']);
const changes = (evs) => evs.filter((e) => CHANGES.has(e.type));
const hasSync = (evs) => evs.some((e) => e.type === 'sync');

describe('one node', () => {
  let cluster;
  let real;
  const proxies = [];
  before(async () => { cluster = await Cluster.start(1); real = cluster.endpoints[0]; });
  after(() => { proxies.forEach((p) => p.close()); cluster?.stop(); });
  const proxy = async () => { const p = await sseProxy(real); proxies.push(p); return p; };

  test('a fresh watch: state, sync, then the changes in order', async () => {
    const c = new FencedClient({ endpoints: [real] });
    const ga = await c.acquire('jsw/a/x', 'h0', { ttl: 30000 });
    const w = c.watch({ prefix: 'jsw/a/' });
    try {
      const start = await collect(w, hasSync);
      assert.deepEqual(start.map((e) => e.type), ['state', 'sync']);
      assert.deepEqual([start[0].key, start[0].holder, String(start[0].token)], ['jsw/a/x', 'h0', String(ga.token)]);
      assert.ok(start[0].token instanceof FencingToken);
      const gb = await c.acquire('jsw/a/y', 'h1', { ttl: 30000 });
      await c.release('jsw/a/y', 'h1', gb.token);
      await c.release('jsw/a/x', 'h0', ga.token);
      await c.acquire('jsw/other', 'h2', { ttl: 30000 }); // not under the prefix
      const evs = changes(await collect(w, (e) => changes(e).length >= 3));
      assert.deepEqual(evs.map((e) => [e.type, e.key]), [['granted', 'jsw/a/y'], ['released', 'jsw/a/y'], ['released', 'jsw/a/x']]);
      assert.ok(evs[0].token.equals(gb.token));
      assert.equal(evs[0].ttlMs, 30000);
      const idx = evs.map((e) => e.index);
      assert.deepEqual(idx, [...new Set(idx)].sort((a, b) => a - b), 'indexes strictly increase');
      assert.equal(w.lastIndex, idx[idx.length - 1]);
    } finally { w.close(); }
  });

  test('a cut stream resumes after the last event delivered', async () => {
    const p = await proxy();
    const c = new FencedClient({ endpoints: [real] });
    const w = new FencedClient({ endpoints: [p.addr] }).watch({ prefix: 'jsw/cut/' });
    try {
      const start = await collect(w, hasSync);
      p.cutAfter = p.events + 2;
      const keys = Array.from({ length: 6 }, (_, i) => `jsw/cut/${i}`);
      for (const k of keys) await c.acquire(k, 'h', { ttl: 30000 });
      const all = [...start, ...await collect(w, (e) => changes(e).length >= keys.length)];
      const evs = changes(all);
      assert.deepEqual(evs.map((e) => e.key), keys, 'each change once, in order');
      await poll('the resumed watch', () => p.watches.length >= 2);
      // The resume asked for what followed an event delivered (the sync of
      // the start, or a change) and before the last change.
      assert.equal(p.watches[0], null);
      assert.ok(all.filter((e) => e.type !== 'state').map((e) => e.index).includes(Number(p.watches[1])), `resumed from ${p.watches[1]}`);
      assert.ok(Number(p.watches[1]) < evs[evs.length - 1].index);
    } finally { w.close(); }
  });

  test('an event the node sends again is not delivered twice', async () => {
    const p = await proxy();
    const c = new FencedClient({ endpoints: [real] });
    const w = new FencedClient({ endpoints: [p.addr] }).watch({ prefix: 'jsw/dup/' });
    try {
      await collect(w, hasSync);
      await c.acquire('jsw/dup/0', 'h', { ttl: 30000 });
      await collect(w, (e) => changes(e).length >= 1);
      p.rewind = true;
      p.cutAfter = p.events; // cut now: the resume is sent one index early
      await c.acquire('jsw/dup/1', 'h', { ttl: 30000 });
      await c.acquire('jsw/dup/2', 'h', { ttl: 30000 });
      const evs = changes(await collect(w, (e) => changes(e).length >= 2));
      assert.deepEqual(evs.map((e) => e.key), ['jsw/dup/1', 'jsw/dup/2']);
      await c.acquire('jsw/dup/3', 'h', { ttl: 30000 });
      const more = changes(await collect(w, (e) => changes(e).length >= 1));
      assert.deepEqual(more.map((e) => e.key), ['jsw/dup/3']);
    } finally { w.close(); }
  });

  test('a reset is delivered, then the watch starts afresh', async () => {
    const p = await proxy();
    const c = new FencedClient({ endpoints: [real] });
    const g = await c.acquire('jsw/reset/a', 'h', { ttl: 30000 });
    const w = new FencedClient({ endpoints: [p.addr] }).watch({ prefix: 'jsw/reset/' });
    try {
      await collect(w, hasSync);
      p.resetAfter = p.events;
      await c.acquire('jsw/reset/b', 'h', { ttl: 30000 });
      const evs = await collect(w, (e) => e.some((x) => x.type === 'reset') && hasSync(e.slice(1)));
      assert.deepEqual([evs[0].type, evs[0].reason], ['reset', 'lagged']);
      const states = Object.fromEntries(evs.filter((e) => e.type === 'state').map((e) => [e.key, String(e.token)]));
      assert.deepEqual(Object.keys(states).sort(), ['jsw/reset/a', 'jsw/reset/b']);
      assert.equal(states['jsw/reset/a'], String(g.token));
      assert.equal(evs[evs.length - 1].type, 'sync');
      assert.equal(p.watches[p.watches.length - 1], null, 'after a reset the watch starts afresh, not from an id');
    } finally { w.close(); }
  });

  test('comments and retry fields are ignored', async () => {
    const p = await proxy();
    p.comments = true;
    const c = new FencedClient({ endpoints: [real] });
    const w = new FencedClient({ endpoints: [p.addr] }).watch({ prefix: 'jsw/comments/' });
    try {
      const start = await collect(w, hasSync);
      assert.deepEqual(start.map((e) => e.type), ['sync']);
      const g = await c.acquire('jsw/comments/a', 'h', { ttl: 30000 });
      await c.release('jsw/comments/a', 'h', g.token);
      const evs = await collect(w, (e) => changes(e).length >= 2);
      assert.deepEqual(evs.map((e) => [e.type, e.key]), [['granted', 'jsw/comments/a'], ['released', 'jsw/comments/a']]);
      assert.equal(p.watches.length, 1, 'the stream was never given up');
    } finally { w.close(); }
  });

  test('a malformed token is never delivered', async () => {
    const p = await proxy();
    const c = new FencedClient({ endpoints: [real] });
    const w = new FencedClient({ endpoints: [p.addr] }).watch({ prefix: 'jsw/bad/' });
    try {
      await collect(w, hasSync);
      p.corrupt = true;
      const g = await c.acquire('jsw/bad/a', 'h', { ttl: 30000 });
      const evs = changes(await collect(w, (e) => changes(e).length >= 1));
      assert.equal(evs[0].type, 'granted');
      assert.equal(String(evs[0].token), String(g.token));
      assert.match(String(w.lastError?.message), /malformed token/);
      assert.ok(p.watches.length >= 2, 'the bad stream was given up and resumed');
    } finally { w.close(); }
  });

  test('a watch refused for good ends with an error event', async () => {
    const w = new FencedClient({ endpoints: [real] }).watch({ key: 'k'.repeat(257) });
    const evs = await collect(w, (e) => e.length >= 1);
    assert.equal(evs[0].type, 'error');
    assert.match(evs[0].reason, /key/);
    assert.equal(w.error?.status, 400);
    assert.deepEqual(await w.next(), { done: true, value: undefined });
  });

  test('bad arguments are refused before anything is sent', () => {
    const c = new FencedClient({ endpoints: [real] });
    for (const o of [{ key: 'a', prefix: 'b' }, { key: '' }, { from: -1 }, { from: '1' }, { progressMs: 0 }]) {
      assert.throws(() => c.watch(o), TypeError, JSON.stringify(o));
    }
  });

  test('close() and the signal end a waiting iteration', async () => {
    for (const how of ['close', 'signal', 'break']) {
      const ac = new AbortController();
      // A quiet stream with a long progress interval: only the stop can end
      // the read the iteration waits on (the idle limit is minutes).
      const w = new FencedClient({ endpoints: [real] }).watch({ key: 'jsw/quiet', progressMs: 60000, signal: ac.signal });
      await collect(w, hasSync);
      if (how === 'break') {
        const it = w[Symbol.asyncIterator]();
        await it.return();
      } else {
        const pending = w.next();
        if (how === 'close') w.close(); else ac.abort();
        assert.deepEqual(await pending, { done: true, value: undefined }, how);
      }
      assert.deepEqual(await w.next(), { done: true, value: undefined }, how);
    }
  });
});

describe('a node that restored a snapshot', () => {
  let cluster;
  before(async () => { cluster = await Cluster.start(1, { args: () => ['--snapshot-interval', '100ms', '--snapshot-threshold', '2'] }); });
  after(() => cluster?.stop());

  test('a resume from compacted history is a reset, then the state', async () => {
    const c = new FencedClient({ endpoints: cluster.endpoints });
    const tokens = {};
    for (let i = 0; i < 5; i++) tokens[`jsc/${i}`] = String((await c.acquire(`jsc/${i}`, 'h', { ttl: 3600000 })).token);
    const node = cluster.nodes[0];
    const snaps = join(cluster.dir, node.id, 'snapshots');
    await poll('a snapshot', () => existsSync(snaps) && readdirSync(snaps).length > 0);
    node.proc.kill('SIGKILL');
    await new Promise((r) => { if (node.proc.exitCode !== null || node.proc.signalCode !== null) r(); else node.proc.once('exit', r); });
    cluster.startNode(node);
    await poll('the node back', async () => (await getJSON(`http://${node.http}/readyz`)).status === 200);
    const w = c.watch({ prefix: 'jsc/', from: 1 });
    try {
      const evs = await collect(w, hasSync);
      assert.deepEqual([evs[0].type, evs[0].reason], ['reset', 'compacted']);
      assert.deepEqual(Object.fromEntries(evs.filter((e) => e.type === 'state').map((e) => [e.key, String(e.token)])), tokens);
      await c.release('jsc/0', 'h', tokens['jsc/0']);
      const more = changes(await collect(w, (e) => changes(e).length >= 1));
      assert.deepEqual([more[0].type, more[0].key], ['released', 'jsc/0']);
    } finally { w.close(); }
  });
});

describe('three nodes', () => {
  let cluster;
  before(async () => { cluster = await Cluster.start(3); });
  after(() => cluster?.stop());

  test('a frozen node is left and the watch resumes elsewhere', async () => {
    const lead = await poll('a leader', () => cluster.leader());
    const fol = cluster.nodes.find((n) => n !== lead);
    const others = cluster.nodes.filter((n) => n !== fol).map((n) => n.http);
    const c = new FencedClient({ endpoints: others, timeoutMs: 60000 });
    const w = new FencedClient({ endpoints: [fol.http, ...others] }).watch({ prefix: 'js3w/', progressMs: 200 });
    try {
      await collect(w, hasSync);
      await c.acquire('js3w/0', 'h', { ttl: 30000 });
      await collect(w, (e) => changes(e).length >= 1);
      fol.proc.kill('SIGSTOP');
      try {
        const keys = [1, 2, 3, 4].map((i) => `js3w/${i}`);
        for (const k of keys) await c.acquire(k, 'h', { ttl: 30000 });
        const evs = changes(await collect(w, (e) => changes(e).length >= keys.length, 60000));
        assert.deepEqual(evs.map((e) => e.key), keys);
      } finally { fol.proc.kill('SIGCONT'); }
    } finally { w.close(); }
  });
});
