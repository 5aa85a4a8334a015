import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FencedClient } from '../src/index.js';

// A bearer token never goes over plain http to another host unless the
// caller says so; to this machine (a development node) it may, as with the
// Go and Python clients.
test('no bearer token over plain http to a remote host', () => {
  for (const ep of ['10.1.2.3:7700', 'http://10.1.2.3:7700', 'HTTP://fenced.example:7700', 'http://[2001:db8::1]:7700']) {
    assert.throws(() => new FencedClient({ endpoints: [ep], token: 's3cret' }), (err) => {
      assert.ok(err instanceof TypeError);
      assert.match(err.message, /insecure: true/);
      assert.doesNotMatch(err.message, /s3cret/);
      return true;
    }, ep);
  }
  assert.throws(() => new FencedClient({ endpoints: ['https://127.0.0.1:1', 'http://10.1.2.3:7700'], token: 's3cret' }), TypeError);
});

test('a loopback node, https, or insecure: true take the token', () => {
  for (const ep of ['127.0.0.1:7700', 'http://localhost:7700', 'http://[::1]:7700', 'https://10.1.2.3:7700']) {
    assert.doesNotThrow(() => new FencedClient({ endpoints: [ep], token: 's3cret' }), ep);
  }
  assert.doesNotThrow(() => new FencedClient({ endpoints: ['http://10.1.2.3:7700'], token: 's3cret', insecure: true }));
  assert.doesNotThrow(() => new FencedClient({ endpoints: ['http://10.1.2.3:7700'] }));
});
