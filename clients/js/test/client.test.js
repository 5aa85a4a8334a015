import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { FencedClient, FencedError, FencingToken, UnknownOutcomeError } from '../src/index.js';
import { Cluster, poll } from './harness.js';

let cluster;
before(async () => { cluster = await Cluster.start(1); });
after(() => cluster?.stop());

// A node stand-in in front of a real one; mode decides each request: "pass"
// forwards it, "commit-then-504" forwards it and answers 504 outcome_unknown
// (the write was committed), "drop" forwards it and destroys the connection
// without an answer, "504" answers outcome_unknown without forwarding, "cut"
// answers 503 unavailable.
async function proxy(target) {
  const p = { mode: 'pass', seen: [] };
  p.server = http.createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    p.seen.push({ path: req.url, body: body ? JSON.parse(body) : {} });
    const answer = (status, obj) => { res.writeHead(status, { 'content-type': 'application/json' }); res.end(JSON.stringify(obj)); };
    if (p.mode === '504') return answer(504, { code: 'outcome_unknown', message: 'proxy: 504' });
    if (p.mode === 'cut') return answer(503, { code: 'unavailable', message: 'proxy: cut' });
    const r = await fetch(`http://${target}${req.url}`, { method: req.method, body: body || undefined, headers: { 'content-type': 'application/json' } });
    const text = await r.text();
    if (p.mode === 'commit-then-504') return answer(504, { code: 'outcome_unknown', message: 'proxy: answer lost' });
    if (p.mode === 'drop') return req.socket.destroy();
    res.writeHead(r.status, { 'content-type': 'application/json' });
    return res.end(text);
  });
  await new Promise((r) => p.server.listen(0, '127.0.0.1', r));
  p.addr = `127.0.0.1:${p.server.address().port}`;
  p.close = () => { p.server.closeAllConnections(); p.server.close(); };
  return p;
}

test('acquire, renew, verify, release', async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints });
  const g = await c.acquire('js/basic', 'alice', { ttl: 10000 });
  assert.ok(g.token instanceof FencingToken);
  assert.equal(g.ttlMs, 10000);
  await assert.rejects(c.acquire('js/basic', 'bob', { ttl: 10000 }), (err) => err instanceof FencedError && err.code === 'held' && err.heldBy === 'alice');
  assert.equal((await c.renew('js/basic', 'alice', g.token)).token.compare(g.token), 0);
  assert.equal((await c.verify('js/basic', g.token, { holder: 'alice' })).allow, true);
  assert.equal((await c.verify('js/basic', 'x1')).reason, 'malformed');
  await c.release('js/basic', 'alice', g.token);
  await c.release('js/basic', 'alice', g.token); // safe to repeat
  const v = await c.verify('js/basic', g.token);
  assert.deepEqual([v.allow, v.reason], [false, 'released']);
});

test('a release repeated with its request id is answered as the first was', async () => {
  // After the key went to another holder, the repeat gets the first
  // release's answer (not stale_token) and leaves the new grant alone.
  const c = new FencedClient({ endpoints: cluster.endpoints });
  const g = await c.acquire('js/once', 'alice', { ttl: 10000 });
  const first = await c.release('js/once', 'alice', g.token, { requestId: 'js-rel-1' });
  const g2 = await c.acquire('js/once', 'bob', { ttl: 10000 });
  const again = await c.release('js/once', 'alice', g.token, { requestId: 'js-rel-1' });
  assert.deepEqual([first.token, again.token, again.state], [g.token.toString(), g.token.toString(), 'released']);
  assert.equal((await c.verify('js/once', g2.token, { holder: 'bob' })).allow, true);
});

test('a token source: one grant per call, strictly increasing', async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints });
  const a = c.tokenSource({ holder: 'src-a' });
  const b = c.tokenSource({ holder: 'src-b' });
  let prev = null;
  for (const src of [a, b, a, a, b]) {
    const t = await src.next('js/source');
    if (prev) assert.equal(t.compare(prev), 1, `${t} after ${prev}`);
    prev = t;
  }
});

test('an unknown outcome is retried with the same request and gets the same grant', async () => {
  const real = cluster.endpoints[0];
  for (const mode of ['commit-then-504', 'drop']) {
    const p = await proxy(real);
    try {
      p.mode = mode;
      const key = `js/unknown-${mode}`;
      const g = await new FencedClient({ endpoints: [p.addr, real] }).acquire(key, 'carol', { ttl: 10000 });
      assert.equal(p.seen.length, 1);
      const direct = new FencedClient({ endpoints: [real] });
      assert.equal((await direct.verify(key, g.token, { holder: 'carol' })).allow, true);
      const again = await direct.acquire(key, 'carol', { ttl: 10000, requestId: p.seen[0].body.request_id });
      assert.equal(again.token.compare(g.token), 0, 'the retry kept the request id');
      await direct.release(key, 'carol', g.token);
    } finally { p.close(); }
  }
});

test('an unknown outcome is never reported as a failure', async () => {
  const p = await proxy(cluster.endpoints[0]);
  try {
    p.mode = '504';
    await assert.rejects(new FencedClient({ endpoints: [p.addr], timeoutMs: 500 }).acquire('js/never', 'dave'), UnknownOutcomeError);
    assert.ok(p.seen.length > 1, 'retried');
    assert.equal(new Set(p.seen.map((s) => s.body.request_id)).size, 1, 'with one request id');
  } finally { p.close(); }
});

test('a lease keeps alive, then releases', async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints });
  const lease = await c.lease('js/lease', { ttl: 3000, holder: 'erin' });
  const first = lease.deadline;
  await poll('a renewal', () => lease.deadline > first + 500);
  assert.equal(lease.valid(), true);
  assert.equal(lease.signal.aborted, false);
  await lease.release();
  assert.equal(lease.signal.aborted, true);
  assert.equal((await c.verify('js/lease', lease.token)).reason, 'released');
});

test('a lease signal aborts before anyone else gets the key', async () => {
  // The holder's client is cut off (every request answered 503): it cannot
  // renew. When B obtains the key, A's lease is over by A's own clock and
  // its signal has aborted.
  const real = cluster.endpoints[0];
  const p = await proxy(real);
  try {
    const lease = await new FencedClient({ endpoints: [p.addr] }).lease('js/lost', { ttl: 2000, holder: 'frank', marginMs: 500 });
    p.mode = 'cut';
    const g = await new FencedClient({ endpoints: [real] }).acquire('js/lost', 'grace', { ttl: 10000, wait: 30000 });
    assert.equal(lease.valid(), false, "B got the key while A's lease was valid by A's clock");
    await poll('the signal', () => lease.signal.aborted, 10000);
    assert.equal(g.token.compare(lease.token), 1);
    await new FencedClient({ endpoints: [real] }).release('js/lost', 'grace', g.token);
  } finally { p.close(); }
});

test("a lease signal aborts when the grant is ended, and with the caller's signal", async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints });
  const lease = await c.lease('js/refused', { ttl: 6000, holder: 'heidi' });
  await c.release('js/refused', 'heidi', lease.token);
  await poll('the signal', () => lease.signal.aborted, 10000);
  assert.match(String(lease.signal.reason), /refused/);

  const ac = new AbortController();
  const mine = await c.lease('js/caller', { ttl: 10000, holder: 'ivan', signal: ac.signal });
  ac.abort(new Error('shutting down'));
  assert.equal(mine.signal.aborted, true);
  await mine.release();
});
