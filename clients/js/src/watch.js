// The watch stream (GET /v1/watch, server-sent events), resumed across nodes
// the way the Go client's Client.Watch does it.

import { FencingToken } from './token.js';
import { FencedError } from './errors.js';
import { parseDuration } from './duration.js';

// A watch refused with one of these would be refused again however often it
// is asked: bad parameters, credentials, no such route.
const REFUSED_FOR_GOOD = new Set([400, 401, 403, 404]);

// The server's default progress interval (api.DefaultProgress).
const DEFAULT_PROGRESS_MS = 10000;

const MAX_LINE = 1 << 20;

/** Signals that the stream ended and cannot be resumed: start afresh. */
class Resync extends Error {}

/** Resolves after ms, or at once when signal aborts. */
function pause(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) { resolve(); return; }
    const done = () => { clearTimeout(t); signal.removeEventListener('abort', done); resolve(); };
    const t = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/** The event of one server-sent event; throws for data that is not one
 * (a malformed token included: the stream is then read elsewhere). */
function eventOf(name, data) {
  const d = JSON.parse(data);
  if (d === null || typeof d !== 'object' || Array.isArray(d)) throw new TypeError(`watch: event ${name} is not a JSON object`);
  const text = (f) => {
    const v = d[f] ?? '';
    if (typeof v !== 'string') throw new TypeError(`watch: field ${f} of event ${name} is not text`);
    return v;
  };
  const token = (f) => {
    const v = text(f);
    if (!v) return null;
    const t = FencingToken.parse(v);
    if (!t) throw new TypeError(`watch: event ${name} has a malformed ${f} ${JSON.stringify(v)}`);
    return t;
  };
  const duration = (f) => { const v = text(f); return v ? parseDuration(v) : null; };
  const index = d.index ?? 0;
  if (!Number.isSafeInteger(index) || index < 0) throw new TypeError(`watch: event ${name} has index ${index}`);
  return {
    type: name || text('type'), index, key: text('key'), holder: text('holder'), token: token('token'), state: text('state'),
    ttlMs: duration('ttl'), lockDelayMs: duration('lock_delay'), prevHolder: text('prev_holder'), prevToken: token('prev_token'),
    ended: text('ended'), reason: text('reason'), value: text('value'),
  };
}

function parseID(text) {
  if (!/^[0-9]{1,20}$/.test(text)) throw new TypeError(`watch: bad event id ${JSON.stringify(text)}`);
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new TypeError(`watch: event id ${text} is beyond 2^53`);
  return n;
}

/** { id, name, data } of each complete event of a byte stream, as the Go
 * client reads them: comments and retry ignored, an event without data
 * dropped. The end of the stream is an error: a watch never ends by itself. */
async function* sse(body) {
  let buf = '';
  let id = null;
  let name = '';
  let data = [];
  const decoder = new TextDecoder('utf-8', { fatal: true });
  for await (const chunk of body) {
    buf += decoder.decode(chunk, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (data.length > 0) yield { id, name, data: data.join('\n') };
        id = null; name = ''; data = [];
        continue;
      }
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'id') id = value;
      else if (field === 'event') name = value;
      else if (field === 'data') data.push(value);
    }
    if (buf.length > MAX_LINE) throw new TypeError('watch: event line too long');
  }
  throw new Error('watch: the stream ended');
}

/**
 * The changes of a key, or of every key with a prefix, as an async
 * iterator: `for await (const ev of client.watch({ prefix: 'jobs/' }))`.
 * It reconnects by itself, to any endpoint, resuming after the last event
 * it delivered (Last-Event-ID): an event is delivered once, in log order,
 * and none is skipped silently. When the history is lost (410 compacted, a
 * reset event) it delivers { type: 'reset' }, then the current state again
 * as 'state' events and a 'sync'. A watch refused for good (bad parameters,
 * credentials) delivers one { type: 'error' } and ends; `error` is then the
 * FencedError. close(), or the signal given, ends it.
 */
export class FencedWatch {
  #client; #key; #prefix; #progressMs; #ac; #gen; #last; #fresh;

  constructor(client, { key, prefix, from, progressMs, signal } = {}) {
    if (key !== undefined && prefix !== undefined) throw new TypeError('watch a key or a prefix, not both');
    if (key !== undefined && (typeof key !== 'string' || key === '')) throw new TypeError(`key must be a non-empty string, not ${String(key)}`);
    if (prefix !== undefined && typeof prefix !== 'string') throw new TypeError(`prefix must be a string, not ${String(prefix)}`);
    if (from !== undefined && !(Number.isSafeInteger(from) && from >= 0)) throw new TypeError(`from must be a log index (an integer >= 0), not ${String(from)}`);
    if (progressMs !== undefined && !(Number.isFinite(progressMs) && progressMs > 0)) throw new TypeError(`progressMs must be a positive number, not ${String(progressMs)}`);
    this.#client = client;
    this.#key = key;
    this.#prefix = prefix;
    this.#progressMs = progressMs;
    this.#last = from ?? 0;
    this.#fresh = from === undefined;
    this.#ac = new AbortController();
    if (signal) {
      if (signal.aborted) this.#ac.abort(signal.reason);
      else signal.addEventListener('abort', () => this.#ac.abort(signal.reason), { once: true });
    }
    /** The FencedError of a watch refused for good. */
    this.error = null;
    /** The last failure of a stream (it was resumed elsewhere). */
    this.lastError = null;
    this.#gen = this.#run();
  }

  /** The index of the last event with an id the watch delivered: pass it as
   * `from` to a later watch to resume after it. */
  get lastIndex() { return this.#last; }

  [Symbol.asyncIterator]() { return this; }

  next() { return this.#gen.next(); }

  return(value) {
    this.close();
    return this.#gen.return(value);
  }

  /** Ends the watch: the stream is closed and iteration ends. */
  close() { this.#ac.abort(new Error('watch closed')); }

  async* #run() {
    const c = this.#client;
    const stop = this.#ac.signal;
    let backoff = 50;
    let attempt = c.preferred;
    while (!stop.aborted) {
      const ep = c.endpoints[attempt % c.endpoints.length];
      const before = `${this.#last}/${this.#fresh}`;
      try {
        yield* this.#stream(ep);
      } catch (err) {
        if (err instanceof Resync) {
          this.#last = 0;
          this.#fresh = true;
          continue;
        }
        if (stop.aborted) return;
        if (err instanceof FencedError && REFUSED_FOR_GOOD.has(err.status)) {
          this.error = err;
          yield { type: 'error', index: 0, reason: err.message };
          return;
        }
        this.lastError = err;
      }
      if (`${this.#last}/${this.#fresh}` !== before) backoff = 50; // the endpoint served: try it again first
      else attempt++;
      await pause(backoff, stop);
      backoff = Math.min(2 * backoff, 2000);
    }
  }

  async* #stream(endpoint) {
    const c = this.#client;
    const q = new URLSearchParams();
    if (this.#key !== undefined) q.set('key', this.#key);
    else if (this.#prefix) q.set('prefix', this.#prefix);
    if (this.#progressMs !== undefined) q.set('progress', `${Math.max(1, Math.round(this.#progressMs))}ms`);
    const headers = { accept: 'text/event-stream' };
    if (!this.#fresh) headers['last-event-id'] = String(this.#last);
    if (c.bearer) headers.authorization = `Bearer ${c.bearer}`;
    // A node that froze or was cut off sends nothing, not even the sync it
    // owes every progress interval: a stream quiet for three of them is
    // given up. One timer per stream, not one per chunk: it checks, when it
    // fires, how long the stream has been quiet.
    const idleMs = 3 * (this.#progressMs ?? DEFAULT_PROGRESS_MS) + 1000;
    const ac = new AbortController();
    const onStop = () => ac.abort(this.#ac.signal.reason);
    this.#ac.signal.addEventListener('abort', onStop, { once: true });
    let seen = Date.now();
    let timer;
    const arm = (ms) => {
      timer = setTimeout(() => {
        const quiet = Date.now() - seen;
        if (quiet >= idleMs) ac.abort(new Error(`${endpoint}: the watch stream was quiet for ${quiet} ms`));
        else arm(idleMs - quiet);
      }, ms);
      timer.unref?.();
    };
    arm(idleMs);
    let res;
    try {
      res = await c.transport.open(`${endpoint}/v1/watch${q.size ? `?${q}` : ''}`, { headers, signal: ac.signal });
      if (res.statusCode !== 200) {
        let text = '';
        for await (const chunk of res) { text += chunk; if (text.length > 65536) break; }
        let body = null;
        try { body = JSON.parse(text); } catch { /* not JSON */ }
        const code = body?.code || `http_${res.statusCode}`;
        if (code === 'compacted') {
          yield { type: 'reset', index: 0, reason: 'compacted' };
          throw new Resync();
        }
        throw new FencedError(`${body?.message ?? text.slice(0, 200)} (${code})`, { code, status: res.statusCode, body: body ?? {} });
      }
      const i = c.endpoints.indexOf(endpoint);
      if (i >= 0) c.preferred = i;
      // State events are held back until the sync that follows them: a
      // stream cut between the two starts afresh, and its states are
      // delivered once, not twice.
      const states = [];
      for await (const { id, name, data } of sse(res)) {
        seen = Date.now();
        const ev = eventOf(name, data);
        if (ev.type === 'reset') {
          yield ev;
          throw new Resync();
        }
        if (ev.type === 'unavailable') {
          // The node cannot serve the stream now (no leader yet, not ready,
          // a limit): a refusal that may pass, here or on another node.
          throw new Error(`${endpoint}: the watch is unavailable (${ev.reason || 'unavailable'})`);
        }
        if (id === null && ev.type === 'state') {
          states.push(ev);
          continue;
        }
        const n = id === null ? null : parseID(id);
        if (n !== null && ev.type !== 'sync' && !this.#fresh && n <= this.#last) continue; // delivered before a reconnection
        while (states.length > 0) yield states.shift();
        // Handed to the caller by the yield: a stream that fails before the
        // next pull resumes after it.
        if (n !== null) {
          this.#last = Math.max(this.#last, n);
          this.#fresh = false;
        }
        yield ev;
      }
    } catch (err) {
      // An abort of the stream says why in its reason, not in the error.
      if (ac.signal.aborted && !this.#ac.signal.aborted && !(err instanceof Resync)) throw ac.signal.reason;
      throw err;
    } finally {
      clearTimeout(timer);
      this.#ac.signal.removeEventListener('abort', onStop);
      res?.destroy();
      ac.abort();
    }
  }
}
