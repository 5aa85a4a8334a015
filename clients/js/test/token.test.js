import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { FencingToken, FenceGuard, StaleTokenError } from '../src/index.js';
import { ROOT } from './harness.js';

// The table fence.Parse (Go) and the Python client are tested against too.
const { cases } = JSON.parse(readFileSync(join(ROOT, 'testdata', 'tokens.json'), 'utf8'));
const show = (c) => `${JSON.stringify(c.input)} (${c.why})`;

test('the shared token table has cases', () => {
  assert.ok(cases.length > 0);
});

// Each test lists every case it gets wrong, not only the first.
function wrong(check) {
  const out = [];
  for (const c of cases) {
    try { check(c); } catch (err) { out.push(`${show(c)}: ${err.message.split('\n')[0]}`); }
  }
  return out;
}

test('parse follows the shared token table', () => {
  assert.deepEqual(wrong((c) => {
    const t = FencingToken.parse(c.input);
    if (c.valid) {
      assert.ok(t, 'refused a valid token');
      assert.equal(t.value, BigInt(c.value));
      assert.equal(t.toString(), c.input, 'round trip');
    } else {
      assert.equal(t, null, `parsed as ${t}`);
    }
  }), []);
});

test('the constructor takes the values the table calls valid, and no other', () => {
  assert.deepEqual(wrong((c) => {
    if (!/^[0-9]+$/.test(c.input) || BigInt(c.input).toString() !== c.input) return; // a spelling, not a value, is wrong
    if (c.valid) assert.equal(new FencingToken(BigInt(c.input)).toString(), c.input);
    else assert.throws(() => new FencingToken(BigInt(c.input)), RangeError);
  }), []);
  assert.throws(() => new FencingToken(2n ** 70n), RangeError);
  assert.throws(() => new FencingToken(-1n), RangeError);
  for (const bad of [1, '1', null, undefined, {}]) assert.throws(() => new FencingToken(bad), TypeError, String(bad));
});

test('the guard admits what the table calls valid, and refuses the rest without raising its fence', () => {
  assert.deepEqual(wrong((c) => {
    const g = new FenceGuard();
    if (c.valid) {
      assert.equal(g.admit('k', c.input).value, BigInt(c.value));
      assert.equal(g.highest('k').toString(), c.input);
    } else {
      let ran = false;
      assert.throws(() => g.write('k', c.input, () => { ran = true; }), StaleTokenError);
      assert.equal(ran, false, 'the write ran');
      assert.equal(g.highest('k'), null, 'the fence was raised');
    }
  }), []);
  // A refused token leaves an existing fence where it was.
  const g = new FenceGuard();
  g.admit('k', '4294967297');
  for (const bad of ['0099', '99999999999999999999', '9223372036854775808', 2n ** 64n, 2 ** 63, 1.5, { toString: () => '5' }]) {
    assert.throws(() => g.admit('k', bad), StaleTokenError, String(bad));
  }
  assert.equal(g.highest('k').toString(), '4294967297');
});

test('parse refuses what is not text', () => {
  for (const bad of [null, undefined, 7, 7n, {}, ['1']]) {
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

test('isNewerThan, as @zukhruf/fencing names it: strictly higher, compared as integers', () => {
  const nine = FencingToken.parse('9');
  const ten = FencingToken.parse('10');
  const later = FencingToken.parse('4294967297'); // epoch 1 beats any seq of epoch 0
  assert.equal(ten.isNewerThan(nine), true);
  assert.equal(nine.isNewerThan(ten), false);
  assert.equal(ten.isNewerThan(FencingToken.parse('10')), false);
  assert.equal(later.isNewerThan(FencingToken.parse('4294967295')), true);
  assert.equal(ten.isNewerThan(9n), true);
  assert.equal(ten.isNewerThan('9'), true);
  assert.throws(() => ten.isNewerThan('09'), TypeError);
  assert.throws(() => ten.isNewerThan(2 ** 60), TypeError); // a number that lost precision
});

test('the guard keeps the highest token per key', () => {
  const g = new FenceGuard();
  const writes = [];
  g.write('k', FencingToken.parse('10'), () => writes.push('a'));
  g.write('k', '10', () => writes.push('b')); // the same grant writes again
  assert.throws(() => g.write('k', '9', () => writes.push('stale')), StaleTokenError);
  assert.throws(() => g.write('k', 'x', () => writes.push('malformed')), StaleTokenError);
  g.write('other', 1, () => writes.push('c')); // keys are independent; a safe integer is exact
  g.write('k', '11', () => writes.push('d'));
  assert.deepEqual(writes, ['a', 'b', 'c', 'd']);
  assert.equal(g.highest('k').value, 11n);
});
