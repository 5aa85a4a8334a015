// The shop's stock service, fenced: the resource of the stock example.
// Reservations are POSTed with the holder's fencing token; the FenceGuard
// keeps the highest token per item and refuses anything lower (409), in
// the same synchronous step as the write.
//
//   node examples/js/stock-service.mjs --port 7800 --qty 1

import http from 'node:http';
import { FenceGuard, StaleTokenError } from '../../clients/js/src/index.js';

/** A stock service with qty of item; fenced unless noFence. */
export function createStockService({ item = 'widget', qty = 1, noFence = false } = {}) {
  const guard = new FenceGuard();
  const state = { qty, reservations: [] };
  const server = http.createServer(async (req, res) => {
    const send = (status, obj) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(obj));
    };
    if (req.method === 'GET' && req.url === '/stock') return send(200, { item, ...state });
    if (req.method !== 'POST' || req.url !== '/reserve') return send(404, { error: 'not found' });
    let body = '';
    for await (const chunk of req) body += chunk;
    const { holder, token, qty: newQty } = JSON.parse(body);
    const write = () => {
      state.qty = newQty;
      state.reservations.push({ item, holder, token });
    };
    try {
      if (noFence) write();
      else guard.write(`stock/${item}`, token, write);
    } catch (err) {
      if (err instanceof StaleTokenError) return send(409, { error: err.message });
      throw err;
    }
    return send(200, { reserved: item, holder });
  });
  return { server, state };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name, def) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? process.argv[i + 1] : def;
  };
  const { server } = createStockService({ qty: Number(arg('qty', '1')), noFence: process.argv.includes('--no-fence') });
  server.listen(Number(arg('port', '7800')), '127.0.0.1', () => console.log(`stock service on ${server.address().port}`));
}
