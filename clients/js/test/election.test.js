import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { FencedClient, FencedError, FencingToken, NoLeaderError, NotLeadingError } from '../src/index.js';
import { LeaderObserver } from '../src/election.js';
import { Cluster, poll } from './harness.js';
import { sseProxy } from './sse-proxy.js';

/** The observer's next change, or a failure at the deadline. */
async function nextLeader(obs, timeoutMs = 30000) {
  let timer;
  const r = await Promise.race([obs.next(), new Promise((resolve) => { timer = setTimeout(() => resolve('timeout'), timeoutMs); })]);
  clearTimeout(timer);
  if (r === 'timeout') throw new Error('the observer reported no change');
  if (r.done) throw new Error('the observation ended');
  return r.value;
}

const show = (l) => [l.holder, String(l.token), l.value];

test('the observer never reports an older leader (the steps of the Go observer test)', () => {
  const t = (s) => FencingToken.parse(s);
  const a = t('4294967297'); // epoch 1 seq 1
  const b = t('8589934593'); // epoch 2 seq 1
  const c = t('8589934594'); // epoch 2 seq 2
  const ev = (type, holder, token, state, extra = {}) => ({ type, holder, token, state, value: '', index: 0, ...extra });
  const steps = [
    [ev('state', 'a', a, 'held'), true],
    [ev('renewed', 'a', a, 'held'), false],
    [ev('released', 'a', a, 'released'), true],
    [ev('state', 'a', a, 'held'), false],
    [ev('granted', 'b', b, 'held'), true],
    [ev('reset', '', null, ''), false],
    [ev('state', 'a', a, 'held'), false],
    [ev('renewed', 'b', b, 'held', { value: 'v' }), true],
    [ev('lock_delay_ended', 'b', b, 'expired'), false],
    [ev('expired', 'b', b, 'expired'), true],
    [ev('lock_delay_ended', 'b', b, 'expired'), false],
    [ev('granted', 'c', c, 'held', { index: 10 }), true],
    // An older index is an older view, whatever it says (a state read
    // before the change just reported).
    [ev('state', 'c', c, 'held', { value: 'older', index: 5 }), false],
  ];
  const o = new LeaderObserver('e');
  steps.forEach(([e, want], i) => {
    assert.equal(o.event(e) !== null, want, `step ${i}: ${e.type} ${e.holder} ${e.token}`);
  });
});

describe('elections on one node', () => {
  let cluster;
  before(async () => { cluster = await Cluster.start(1); });
  after(() => cluster?.stop());
  const client = () => new FencedClient({ endpoints: cluster.endpoints });

  test('campaign, observe, proclaim, resign', async () => {
    const c = client();
    const name = 'jse/leader';
    const obs = client().election(name, { holder: 'observer' }).observe();
    try {
      const e1 = c.election(name, { holder: 'n1', ttl: 5000, value: 'http://n1' });
      const e2 = c.election(name, { holder: 'n2', ttl: 5000, value: 'http://n2' });
      await assert.rejects(e1.leader(), NoLeaderError);
      assert.equal(e1.token, null);
      assert.equal(e1.signal.aborted, true, 'a candidate that never led is not leading');
      await e1.campaign();
      assert.equal(e1.leading(), true);
      const won2 = e2.campaign();
      assert.deepEqual(show(await nextLeader(obs)), ['n1', String(e1.token), 'http://n1']);
      // n2 waits in the queue while n1 leads.
      assert.equal((await e1.leader()).holder, 'n1');
      assert.equal(e2.leading(), false);

      await e1.proclaim('http://n1:2');
      assert.deepEqual(show(await nextLeader(obs)), ['n1', String(e1.token), 'http://n1:2']);
      assert.equal((await e2.leader()).value, 'http://n1:2');

      const t1 = e1.token;
      await e1.resign();
      await won2;
      assert.ok(e2.token.isNewerThan(t1));
      for (;;) {
        const l = await nextLeader(obs);
        assert.ok(l.token.compare(t1) >= 0, `the observer went back to ${l.token} after ${t1}`);
        if (l.holder === 'n2') {
          assert.deepEqual(show(l), ['n2', String(e2.token), 'http://n2']);
          break;
        }
      }
      assert.equal((await e1.leader()).holder, 'n2');
      assert.equal(e2.signal.aborted, false);

      // Not leading: a proclaim changes nothing.
      await assert.rejects(e1.proclaim('x'), NotLeadingError);
      const k = await c.key(name);
      assert.deepEqual([k.holder, String(k.token), k.value], ['n2', String(e2.token), 'http://n2']);
      await e2.resign();
    } finally { await obs.return(); }
  });

  test('a proclaim after the grant ended makes no new grant', async () => {
    // The grant ends on the server (released in the holder's name
    // elsewhere) while this process still believes it leads: the key is
    // free, and a proclaim must not take it afresh.
    const c = client();
    const name = 'jse/ended';
    const e = c.election(name, { holder: 'n1', ttl: 30000, value: 'a' });
    await e.campaign();
    const tok = e.token;
    await c.release(name, 'n1', tok);
    assert.equal(e.leading(), true, 'the keepalive found out already; the test needs it not to');
    await assert.rejects(e.proclaim('b'), NotLeadingError);
    const k = await c.key(name);
    assert.deepEqual([k.state, String(k.token), k.holder], ['released', String(tok), 'n1'], 'the proclaim acquired the key');
    await assert.rejects(e.leader(), NoLeaderError);
    assert.equal(e.leading(), false);
  });

  test('a proclaim while another leads changes nothing', async () => {
    const c = client();
    const name = 'jse/taken';
    const e = c.election(name, { holder: 'n1', ttl: 30000, value: 'a' });
    await e.campaign();
    await c.release(name, 'n1', e.token);
    const g = await c.acquire(name, 'n3', { ttl: 30000, value: 'mine' });
    await assert.rejects(e.proclaim('b'), NotLeadingError);
    const k = await c.key(name);
    assert.deepEqual([k.holder, String(k.token), k.value], ['n3', String(g.token), 'mine']);
    await c.release(name, 'n3', g.token);
  });

  test('a proclaim without leading sends nothing', async () => {
    const c = client();
    await assert.rejects(c.election('jse/never', { holder: 'n1' }).proclaim('x'), NotLeadingError);
    await assert.rejects(c.key('jse/never'), (err) => err instanceof FencedError && err.code === 'unknown_key');
  });

  test('a campaign ends with its signal', async () => {
    const c = client();
    const name = 'jse/busy';
    const e1 = c.election(name, { holder: 'n1', ttl: 30000 });
    await e1.campaign();
    const ac = new AbortController();
    const campaign = c.election(name, { holder: 'n2', ttl: 30000 }).campaign({ signal: ac.signal });
    ac.abort(new Error('shutting down'));
    await assert.rejects(campaign, /shutting down/);
    assert.equal((await e1.leader()).holder, 'n1');
    await e1.resign();
  });

  test("a campaign's signal is the campaign's alone: aborting it later leaves the leadership", async () => {
    // As the Go client's Campaign(ctx): the context bounds the campaign,
    // not the leadership it won.
    const c = client();
    const ac = new AbortController();
    const e = c.election('jse/signal', { holder: 'n1', ttl: 30000 });
    await e.campaign({ signal: ac.signal });
    ac.abort(new Error('campaign over'));
    assert.equal(e.signal.aborted, false);
    assert.equal(e.leading(), true);
    await e.proclaim('still here');
    assert.equal((await e.leader()).value, 'still here');
    await e.resign();
  });

  test('close() ends an observation waiting for a change', async () => {
    for (const how of ['close', 'return']) {
      const obs = client().election(`jse/quiet-${how}`).observe();
      const pending = obs.next();
      if (how === 'close') obs.close(); else await obs.return();
      assert.deepEqual(await pending, { done: true, value: undefined }, how);
    }
  });

  test('bad arguments', () => {
    const c = client();
    assert.throws(() => c.election(''), TypeError);
    assert.throws(() => c.election('x', { ttl: 1000, marginMs: 2000 }), TypeError);
  });
});

describe('an observer after a reset', () => {
  // After a reset the observer reads the key again: a leadership that ended
  // in the gap, and whose key was forgotten since, is reported as nobody
  // leading, though the new stream has no event of the key.
  let cluster;
  before(async () => { cluster = await Cluster.start(1, { args: () => ['--key-retention', '1s'] }); });
  after(() => cluster?.stop());

  test('a reset is followed by a read of the key', async () => {
    const real = cluster.endpoints[0];
    const p = await sseProxy(real);
    const c = new FencedClient({ endpoints: [real] });
    const name = 'jse/reset';
    const obs = new FencedClient({ endpoints: [p.addr] }).election(name).observe();
    try {
      const e = c.election(name, { holder: 'n1', ttl: 30000 });
      await e.campaign();
      assert.deepEqual(show(await nextLeader(obs)).slice(0, 2), ['n1', String(e.token)]);
      const tok = e.token;
      // The release is replaced by a reset, and the watch cannot start
      // again until the key is forgotten: its new stream has no state of
      // the key to report.
      p.resetAfter = p.events;
      p.refuse = true;
      await e.resign();
      await poll('the key forgotten', async () => {
        try { await c.key(name); return false; } catch (err) { return err instanceof FencedError && err.code === 'unknown_key'; }
      });
      p.refuse = false;
      const l = await nextLeader(obs);
      assert.deepEqual([l.holder, String(l.token)], ['', String(tok)], `nobody leads after the leadership of ${tok}`);
    } finally {
      await obs.return();
      p.close();
    }
  });
});
