import { test, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { FencedClient } from '../src/index.js';
import { Cluster, ROOT, poll, stopped } from './harness.js';
import { createStockService } from '../../../examples/js/stock-service.mjs';

let cluster;
beforeEach(async () => { cluster = await Cluster.start(3); });
afterEach((t) => { cluster?.stop(); });

test('a node down, then a frozen leader: the client goes on through the others', async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints });
  cluster.nodes[0].proc.kill('SIGKILL');
  const g = await c.acquire('js/3/a', 'ivan', { ttl: 10000 });
  assert.equal((await c.verify('js/3/a', g.token)).allow, true);
  cluster.startNode(cluster.nodes[0]);
  await poll('the node back', async () => (await fetch(`http://${cluster.nodes[0].http}/readyz`)).ok);
  const lead = await poll('a leader', () => cluster.leader());
  lead.proc.kill('SIGSTOP');
  try {
    const g2 = await new FencedClient({ endpoints: cluster.endpoints, timeoutMs: 60000 }).acquire('js/3/b', 'judy', { ttl: 10000 });
    assert.equal(g2.token.compare(g.token), 1);
  } finally { lead.proc.kill('SIGCONT'); }
});

// Kleppmann's scenario with examples/js/stock.mjs: holder A (a child
// process) checks its lease and is frozen (SIGSTOP) past its TTL; B
// reserves the last item; A wakes and sends its stale write, which the
// stock service's guard refuses.
async function kleppmann(noFence) {
  const { server, state } = createStockService({ qty: 1, noFence });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const service = `http://127.0.0.1:${server.address().port}`;
  const script = join(ROOT, 'examples', 'js', 'stock.mjs');
  const eps = cluster.endpoints.join(',');
  try {
    const a = spawn(process.execPath, [script, '--endpoints', eps, '--service', service, '--holder', 'A', '--ttl', '1', '--wait-for-go'],
      { stdio: ['pipe', 'pipe', 'inherit'] });
    const out = [];
    const lines = createInterface({ input: a.stdout });
    const checked = new Promise((resolve) => lines.on('line', (l) => { out.push(l); if (l === 'lease checked') resolve(); }));
    const exited = new Promise((resolve) => a.on('exit', (code) => resolve(code)));
    await checked;
    a.kill('SIGSTOP');
    await poll('A stopped', () => stopped(a.pid), 5000);
    a.stdin.write('go\n'); // read once A wakes
    const b = spawn(process.execPath, [script, '--endpoints', eps, '--service', service, '--holder', 'B', '--ttl', '10', '--wait', '30'],
      { stdio: ['ignore', 'pipe', 'inherit'] });
    let bOut = '';
    b.stdout.on('data', (d) => { bOut += d; });
    const bCode = await new Promise((resolve) => b.on('exit', resolve));
    assert.match(bOut, /reserved widget for B/, `B exited ${bCode}: ${bOut}`);
    a.kill('SIGCONT');
    const code = await exited;
    return { code, out: out.join('\n'), who: state.reservations.map((r) => r.holder) };
  } finally {
    server.closeAllConnections();
    server.close();
  }
}

test('the stock example: the frozen holder is refused by the resource', async () => {
  const { code, out, who } = await kleppmann(false);
  assert.equal(code, 3, out);
  assert.match(out, /refused/);
  assert.deepEqual(who, ['B']);
});

test('the stock example without the fence sells the last item twice (positive control)', async () => {
  const { code, out, who } = await kleppmann(true);
  assert.equal(code, 0, out);
  assert.deepEqual(who, ['B', 'A']);
});

test('a semaphore and shared grants: limit and mode', async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints });
  const a = await c.acquire('js/sem', 'a', { ttl: 10000, limit: 2 });
  const b = await c.acquire('js/sem', 'b', { ttl: 10000, limit: 2 });
  assert.equal(a.limit, 2);
  assert.equal(b.token.compare(a.token), 1);
  await assert.rejects(c.acquire('js/sem', 'c', { ttl: 10000, limit: 2 }), (e) => e.code === 'held');
  await assert.rejects(c.acquire('js/sem', 'c', { ttl: 10000, limit: 3 }), (e) => e.code === 'limit_mismatch');
  assert.equal((await c.verify('js/sem', a.token)).allow, true);
  const r = await c.acquire('js/rw', 'r1', { ttl: 10000, mode: 'shared' });
  assert.equal(r.mode, 'shared');
  await c.acquire('js/rw', 'r2', { ttl: 10000, mode: 'shared' });
  await assert.rejects(c.acquire('js/rw', 'w', { ttl: 10000 }), (e) => e.code === 'held');
  const gs = await c.acquireMulti(['js/m1', 'js/m2'], 'm', { ttl: 10000 });
  assert.deepEqual(gs.map((g) => g.key), ['js/m1', 'js/m2']);
  await assert.rejects(c.acquireMulti(['js/m3', 'js/m2'], 'o', { ttl: 10000 }), (e) => e.code === 'held');
});

test("a permit's and a reader's lock-delay keep their slot", async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints });
  await c.acquire('js/sd', 'a', { ttl: 200, limit: 2, lockDelay: 60000 });
  await c.acquire('js/sd', 'b', { ttl: 30000, limit: 2 });
  const refused = async (key, holder, opts) => {
    try {
      await c.acquire(key, holder, opts);
    } catch (e) {
      if (e.code === 'held') return false; // the lease has not run out yet
      return e.code === 'lock_delay';
    }
    throw new Error(`${holder} was granted beside an expired grant's lock-delay`);
  };
  await poll("a's permit to expire", () => refused('js/sd', 'c', { ttl: 30000, limit: 2 }));
  await c.acquire('js/sdr', 'r1', { ttl: 200, mode: 'shared', lockDelay: 60000 });
  await poll("r1's grant to expire", () => refused('js/sdr', 'w', { ttl: 30000 }));
  assert.equal((await c.acquire('js/sdr', 'r2', { ttl: 30000, mode: 'shared' })).mode, 'shared');
});

test('a set renewed and released all or none', async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints });
  const gs = await c.acquireMulti(['js/s1', 'js/s2'], 'm', { ttl: 10000 });
  const rn = await c.renewMulti(gs, 'm');
  assert.deepEqual(rn.map((g) => g.token.toString()), gs.map((g) => g.token.toString()));
  const stale = [gs[0], ['js/s2', (BigInt(gs[1].token.toString()) + 1n).toString()]];
  await assert.rejects(c.releaseMulti(stale, 'm'), (e) => e.code === 'stale_token' && /js\/s2/.test(e.message));
  await assert.rejects(c.renewMulti(gs, 'o'), (e) => e.code === 'not_holder');
  assert.equal((await c.key('js/s1')).state, 'held'); // nothing changed
  const out = await c.releaseMulti(gs, 'm', { requestId: 'js-set-1' });
  assert.deepEqual(out.map((r) => r.state), ['released', 'released']);
  const g = await c.acquire('js/s2', 'o', { ttl: 10000 });
  const again = await c.releaseMulti(gs, 'm', { requestId: 'js-set-1' }); // a repeat
  assert.equal(again[1].token, gs[1].token.toString());
  assert.equal((await c.key('js/s2')).token.toString(), g.token.toString());
});
