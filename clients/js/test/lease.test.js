import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FencedLease, FencedError, FencingToken } from '../src/index.js';
import { poll } from './harness.js';

// A client whose acquire succeeds and whose renewals always find no node
// (503): the lease must end by its deadline, however its timers fire.
function unreachableAfterAcquire() {
  return {
    renewals: 0,
    async acquire(key, holder) {
      return { key, holder, token: FencingToken.parse('4294967297'), ttlMs: 300, renewed: false };
    },
    async renew() {
      this.renewals++;
      throw new FencedError('no node (unavailable)', { code: 'unavailable', status: 503 });
    },
    async release() { return {}; },
  };
}

test('a lease whose renewals all fail aborts at its deadline', async () => {
  for (let i = 0; i < 20; i++) {
    const c = unreachableAfterAcquire();
    const lease = await FencedLease.acquire(c, 'k', { ttl: 300, holder: 'h' });
    await poll('the signal', () => lease.signal.aborted, 5000);
    assert.equal(lease.valid(), false);
    assert.match(String(lease.signal.reason), /deadline/);
    assert.ok(c.renewals > 0, 'it tried to renew');
  }
});

test('a refused renewal aborts at once', async () => {
  const c = unreachableAfterAcquire();
  c.renew = async () => { throw new FencedError('superseded (stale_token)', { code: 'stale_token', status: 409 }); };
  const lease = await FencedLease.acquire(c, 'k', { ttl: 3000, holder: 'h' });
  await poll('the signal', () => lease.signal.aborted, 5000);
  assert.ok(performance.now() < lease.deadline, 'before the deadline');
  assert.match(String(lease.signal.reason), /refused/);
});
