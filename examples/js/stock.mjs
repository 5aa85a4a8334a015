// Reserve the last item in stock, fenced: the JavaScript twin of
// examples/stock (Go) and examples/python/stock.py.
//
// The holder takes a lease on the item, checks it still holds it, reads the
// stock and sends its reservation to the stock service WITH ITS TOKEN; the
// service's FenceGuard refuses a token lower than one it has seen. A holder
// that froze after its check and woke after someone else's grant is refused
// by the service, whatever it believes about its lease.
//
//   node examples/js/stock.mjs --endpoints 127.0.0.1:7700 --service http://127.0.0.1:7800 --holder alice
//
// With --wait-for-go the holder stops after its lease check and writes only
// when a line arrives on standard input: the window in which a real process
// is paused. Exit codes: 0 reserved, 1 error, 3 refused by the fence, 4 sold out.

import { createInterface } from 'node:readline';
import { FencedClient } from '../../clients/js/src/index.js';

const EXIT = { ok: 0, error: 1, refused: 3, soldOut: 4 };

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
}

async function main() {
  const client = new FencedClient({ endpoints: arg('endpoints', process.env.FENCE_ENDPOINTS ?? '127.0.0.1:7700') });
  const service = arg('service', 'http://127.0.0.1:7800');
  const holder = arg('holder');
  const item = arg('item', 'widget');
  if (!holder) throw new Error('--holder is required');
  const lease = await client.lease(`stock/${item}`, {
    holder, ttl: Number(arg('ttl', '2')) * 1000, wait: Number(arg('wait', '30')) * 1000,
  });
  try {
    console.log(`acquired ${item} token ${lease.token}`);
    if (!lease.valid()) throw new Error('lease lost before the write');
    const { qty } = await (await fetch(`${service}/stock`)).json();
    if (qty === 0) { console.log('sold out'); return EXIT.soldOut; }
    console.log('lease checked');
    if (process.argv.includes('--wait-for-go')) {
      const rl = createInterface({ input: process.stdin });
      await new Promise((resolve) => rl.once('line', resolve));
      rl.close();
    }
    // From here on the holder acts on its belief; only the fence protects.
    const resp = await fetch(`${service}/reserve`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ holder, token: lease.token, qty: qty - 1 }),
    });
    if (resp.status === 409) { console.log(`refused: ${(await resp.json()).error}`); return EXIT.refused; }
    if (!resp.ok) throw new Error(`stock service: ${resp.status}`);
    console.log(`reserved ${item} for ${holder}`);
    return EXIT.ok;
  } finally {
    await lease.release().catch(() => {});
  }
}

main().then((code) => process.exit(code), (err) => { console.error(`error: ${err.message}`); process.exit(EXIT.error); });
