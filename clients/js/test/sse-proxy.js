// A node stand-in for watch tests: it forwards watch streams (and any other
// request) to a real node, records each watch request's Last-Event-ID, and
// can cut, corrupt, reset or refuse a stream.

import http from 'node:http';

export async function sseProxy(target) {
  const p = {
    watches: [], // Last-Event-ID of each watch request (null: fresh)
    events: 0, // events forwarded, over every stream
    cutAfter: null, // after this many events, close the stream (once)
    resetAfter: null, // after this many events, send a reset and close (once)
    corrupt: false, // the next granted event's token is sent as "0034" (once)
    rewind: false, // the next resumed watch asks the node one index earlier (once)
    refuse: false, // answer watches 503 while set
    comments: false, // heartbeats before each event while set: comments, a retry field, a data-less event
  };
  const upstream = new http.Agent({ keepAlive: false });
  p.server = http.createServer(async (req, res) => {
    if (!req.url.startsWith('/v1/watch')) {
      let body = '';
      for await (const c of req) body += c;
      const r = await fetch(`http://${target}${req.url}`, { method: req.method, body: body || undefined, headers: { 'content-type': 'application/json' } });
      res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
      res.end(await r.text());
      return;
    }
    if (p.refuse) {
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end('{"code":"unavailable","message":"proxy: refused"}');
      return;
    }
    const last = req.headers['last-event-id'] ?? null;
    p.watches.push(last);
    const headers = { accept: 'text/event-stream' };
    if (last !== null) {
      headers['last-event-id'] = p.rewind ? String(Number(last) - 1) : last;
      p.rewind = false;
    }
    const up = http.get(`http://${target}${req.url}`, { headers, agent: upstream }, (r) => {
      if (r.statusCode !== 200) {
        res.writeHead(r.statusCode, { 'content-type': 'application/json' });
        r.pipe(res);
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', connection: 'close' });
      let buf = '';
      const end = () => { r.destroy(); res.destroy(); };
      r.setEncoding('utf8');
      r.on('data', (chunk) => {
        buf += chunk;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          let frame = buf.slice(0, i + 2);
          buf = buf.slice(i + 2);
          if (p.corrupt && frame.includes('event: granted')) {
            frame = frame.replace(/"token":"[0-9]+"/, '"token":"0034"');
            p.corrupt = false;
          }
          p.events++;
          if (p.resetAfter !== null && p.events > p.resetAfter) {
            p.resetAfter = null;
            res.end('event: reset\ndata: {"type":"reset","reason":"lagged"}\n\n');
            r.destroy();
            return;
          }
          if (p.cutAfter !== null && p.events > p.cutAfter) {
            p.cutAfter = null;
            end();
            return;
          }
          if (p.comments) res.write(': heartbeat\n\nretry: 5000\n\n:\nevent: granted\nid: 1\n\n');
          res.write(frame);
        }
      });
      r.on('error', end);
      r.on('end', end);
    });
    up.on('error', () => res.destroy());
    req.on('close', () => up.destroy());
  });
  await new Promise((r) => p.server.listen(0, '127.0.0.1', r));
  p.addr = `127.0.0.1:${p.server.address().port}`;
  p.close = () => { p.server.closeAllConnections(); p.server.close(); upstream.destroy(); };
  return p;
}
