import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FencingToken, FenceGuard, StaleTokenError } from '../src/index.js';

test('parse accepts decimal digits only', () => {
  assert.equal(FencingToken.parse('4294967297').value, 4294967297n);
  assert.equal(FencingToken.parse('18446744073709551615').value, 2n ** 64n - 1n); // beyond 2^53: exact
  assert.equal(FencingToken.parse('007').value, 7n); // /^\d+$/: leading zeros are digits
  for (const bad of ['', ' 1', '1 ', '+1', '-1', '1e3', '0x10', '1.0', '١', '1n', null, undefined, 7, 7n]) {
    assert.equal(FencingToken.parse(bad), null, `parse(${String(bad)})`);
  }
});

test('tokens compare as integers and travel as decimal text', () => {
  const nine = FencingToken.parse('9');
  const ten = FencingToken.parse('10');
  assert.equal(nine.compare(ten), -1); // as text, "9" > "10"
  assert.equal(ten.compare(nine), 1);
  assert.ok(ten.equals(10n));
  assert.equal(JSON.stringify({ token: FencingToken.parse('9007199254740993') }), '{"token":"9007199254740993"}');
  assert.equal(String(FencingToken.parse('4294967297')), '4294967297');
  assert.equal(FencingToken.parse('4294967297').epoch, 1n);
  assert.equal(FencingToken.parse('4294967297').seq, 1n);
});

test('the guard keeps the highest token per key', () => {
  const g = new FenceGuard();
  const writes = [];
  g.write('k', FencingToken.parse('10'), () => writes.push('a'));
  g.write('k', '10', () => writes.push('b')); // the same grant writes again
  assert.throws(() => g.write('k', '9', () => writes.push('stale')), StaleTokenError);
  assert.throws(() => g.write('k', 'x', () => writes.push('malformed')), StaleTokenError);
  g.write('other', '1', () => writes.push('c')); // keys are independent
  g.write('k', '11', () => writes.push('d'));
  assert.deepEqual(writes, ['a', 'b', 'c', 'd']);
  assert.equal(g.highest('k').value, 11n);
});
