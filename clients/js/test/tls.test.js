import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { FencedClient, UnavailableError } from '../src/index.js';
import { Cluster, collect, makeTLS } from './harness.js';

// One node serving its API over TLS only and requiring a client certificate
// (certificates made by `fencectl tls init`).
let cluster;
let tls;
before(async () => {
  tls = makeTLS(['n1']);
  const f = (...p) => `${tls.dir}/${p.join('/')}`;
  cluster = await Cluster.start(1, {
    args: (node) => ['--tls-cert', f(node.id, 'server.pem'), '--tls-key', f(node.id, 'server-key.pem'), '--tls-ca', f('ca.pem'),
      '--tls-client-auth', 'require'],
    probe: { ca: tls.pem('ca.pem'), cert: tls.pem('admin.pem'), key: tls.pem('admin-key.pem') },
  });
});
after(() => {
  cluster?.stop();
  if (tls) rmSync(tls.dir, { recursive: true, force: true });
});

const addrs = () => cluster.nodes.map((n) => n.http);

test('mutual TLS with PEM Buffers: acquire, verify, release', async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints, ca: tls.pem('ca.pem'), cert: tls.pem('client.pem'), key: tls.pem('client-key.pem') });
  const g = await c.acquire('js/tls', 'client/a', { ttl: 10000 });
  assert.equal((await c.verify('js/tls', g.token)).allow, true);
  await c.release('js/tls', 'client/a', g.token);
  c.close();
});

test('mutual TLS with PEM strings, and bare host:port endpoints reached with https', async () => {
  const str = (name) => readFileSync(`${tls.dir}/${name}`, 'utf8');
  const c = new FencedClient({ endpoints: addrs(), ca: str('ca.pem'), cert: str('client.pem'), key: str('client-key.pem') });
  assert.deepEqual(c.endpoints, cluster.endpoints);
  const g = await c.acquire('js/tls-str', 'client/b', { ttl: 10000 });
  await c.release('js/tls-str', 'client/b', g.token);
  c.close();
});

test('a watch over mutual TLS', async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints, ca: tls.pem('ca.pem'), cert: tls.pem('client.pem'), key: tls.pem('client-key.pem') });
  const w = c.watch({ key: 'js/tls-watch' });
  try {
    // A fresh watch of a key no one holds says so (absent), then sync.
    assert.deepEqual((await collect(w, (e) => e.some((x) => x.type === 'sync'))).map((e) => [e.type, e.state ?? '']), [['state', 'absent'], ['sync', '']]);
    const g = await c.acquire('js/tls-watch', 'client/d', { ttl: 10000 });
    const [ev] = await collect(w, (e) => e.length >= 1);
    assert.deepEqual([ev.type, String(ev.token)], ['granted', String(g.token)]);
  } finally { w.close(); c.close(); }
});

test('without a client certificate the error names the TLS alert', async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints, ca: tls.pem('ca.pem'), timeoutMs: 5000 });
  await assert.rejects(c.status(), (err) => {
    assert.ok(err instanceof UnavailableError, `${err.name}: ${err.message}`);
    assert.match(err.message, /TLS handshake failed: ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED/);
    assert.match(err.message, /client certificate/);
    assert.equal(err.cause?.code, 'ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED');
    return true;
  });
  // A refused handshake is a request the server never read: a write there
  // is retried as not sent, never reported as an unknown outcome.
  await assert.rejects(c.transport.request(`${cluster.endpoints[0]}/v1/acquire`, { method: 'POST', body: '{}' }), (err) => {
    assert.deepEqual([err.name, err.code, err.sent], ['TransportError', 'ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED', false]);
    return true;
  });
  c.close();
});

test("without the cluster's CA the error says the server's certificate is not trusted", async () => {
  const c = new FencedClient({ endpoints: cluster.endpoints, timeoutMs: 5000 });
  await assert.rejects(c.status(), (err) => {
    assert.ok(err instanceof UnavailableError, `${err.name}: ${err.message}`);
    assert.match(err.message, /TLS handshake failed: UNABLE_TO_VERIFY_LEAF_SIGNATURE .*pass ca/);
    assert.equal(err.cause?.code, 'UNABLE_TO_VERIFY_LEAF_SIGNATURE');
    return true;
  });
  c.close();
});

test('plain http to a TLS node says so', async () => {
  const c = new FencedClient({ endpoints: addrs().map((a) => `http://${a}`), timeoutMs: 1000 });
  await assert.rejects(c.status(), /HTTP request to an HTTPS server/);
});

test('a cert without its key, or an unknown scheme, is refused at construction', () => {
  assert.throws(() => new FencedClient({ endpoints: cluster.endpoints, cert: tls.pem('client.pem') }), /cert and key/);
  for (const typo of ['htps', 'ftp', 'hxxp']) {
    assert.throws(() => new FencedClient({ endpoints: [`${typo}://${addrs()[0]}`] }), (err) => err instanceof TypeError && err.message.includes(`"${typo}"`));
  }
  for (const bad of [`htps:/${addrs()[0]}`, 'https://', '127.0.0.1:port']) {
    assert.throws(() => new FencedClient({ endpoints: [bad] }), TypeError, bad);
  }
});
