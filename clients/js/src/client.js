// The fenced client: endpoints tried in turn, retries only where safe.

import { newRequestId } from './ids.js';
import { FencingToken } from './token.js';
import { FencedError, UnavailableError, UnknownOutcomeError } from './errors.js';
import { FencedLease } from './lease.js';
import { Transport, TransportError, endpointURL, isLoopback } from './transport.js';
import { durationText, parseDuration } from './duration.js';
import { FencedWatch } from './watch.js';
import { FencedElection } from './election.js';

export { durationText, parseDuration, newRequestId };

const LEADER_HEADER = 'x-fenced-leader';

// Codes that say the request was not served: another node may serve it.
const SAFE_TO_RETRY = new Set(['not_leader', 'not_ready', 'not_member', 'busy', 'shutting_down', 'unavailable']);

function grantOf(d) {
  const token = FencingToken.parse(d.token);
  if (!token) throw new FencedError(`the server sent a malformed token: ${d.token}`, { code: 'malformed_answer' });
  return { key: d.key, holder: d.holder, token, ttlMs: parseDuration(d.ttl), renewed: Boolean(d.renewed), value: d.value ?? '', limit: d.limit ?? 0, mode: d.mode ?? '', proof: d.proof ?? '' };
}

/** The keys of a set's release or renewal: grants (of acquireMulti) or
 * [key, token] pairs. */
function grantRefs(grants) {
  return grants.map((g) => (Array.isArray(g) ? { key: g[0], token: String(g[1]) } : { key: g.key, token: String(g.token) }));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** AbortSignal.any (Node 20.3+), with a fallback for older runtimes. */
function anySignal(signals) {
  if (typeof AbortSignal.any === 'function') return AbortSignal.any(signals);
  const ac = new AbortController();
  for (const s of signals) {
    if (s.aborted) { ac.abort(s.reason); break; }
    s.addEventListener('abort', () => ac.abort(s.reason), { once: true });
  }
  return ac.signal;
}

/**
 * A client of a fenced cluster through any of its nodes. It retries only
 * what is safe: requests that were not served (a node down, no leader: the
 * 503 codes), and writes whose outcome is unknown (504 outcome_unknown, or a
 * connection lost after the request was sent), which are idempotent (an
 * acquire keeps its request id and holder; a release of a released grant
 * succeeds). An unknown outcome is retried until a definite answer or the
 * deadline, and only then thrown as UnknownOutcomeError: never as a failure.
 */
export class FencedClient {
  /**
   * ca, cert, key: PEM (strings or Buffers) as node:https takes them: the
   * CA that signs the nodes' certificates, and a client certificate for
   * clusters that ask for one (mutual TLS). With any of them every endpoint
   * is reached with https, as the Go client's WithTLS does. token (a bearer
   * token) goes over https, or over plain http to this machine only, unless
   * insecure is true (a network the caller trusts).
   */
  constructor({ endpoints, token, timeoutMs = 30000, attemptTimeoutMs = 5000, ca, cert, key, insecure = false } = {}) {
    const list = typeof endpoints === 'string' ? endpoints.split(',') : endpoints ?? [];
    if (!Array.isArray(list)) throw new TypeError('endpoints: an array of "host:port" or URLs, or one comma-separated string');
    if ((cert === undefined) !== (key === undefined)) throw new TypeError('cert and key go together: a client certificate needs its key');
    const tls = ca !== undefined || cert !== undefined ? Object.fromEntries(Object.entries({ ca, cert, key }).filter(([, v]) => v !== undefined)) : undefined;
    this.endpoints = list.map((e) => String(e).trim()).filter(Boolean).map((e) => endpointURL(e, tls !== undefined));
    if (this.endpoints.length === 0) throw new TypeError('no endpoints');
    if (token && !insecure) {
      // A bearer token over plain http can be read off the wire: only to
      // this machine (a development node), or when the caller says so.
      const plain = this.endpoints.filter((e) => e.startsWith('http://') && !isLoopback(e));
      if (plain.length > 0) {
        throw new TypeError(`refusing to send the bearer token over plain http to ${plain.join(', ')}: use https:// endpoints (or ca), or pass insecure: true to send it in clear`);
      }
    }
    this.transport = new Transport(tls);
    this.bearer = token;
    this.timeoutMs = timeoutMs;
    // A node that accepts connections but never answers (frozen) would
    // hold a request until the deadline: each attempt gets at most this long
    // (plus an acquire's wait), then the next node is tried.
    this.attemptTimeoutMs = attemptTimeoutMs;
    this.preferred = 0;
  }

  /** Takes key for holder; rejects with code "held" (err.heldBy) when
   * someone else has it. value (at most 1 KiB of text) is published with
   * the grant; an acquire by the holder of the grant replaces it and keeps
   * the token. limit (1 to 1024) takes one of the key's permits, the key
   * being a semaphore of that many (code "limit_mismatch" when its live
   * permits have another limit); mode "shared" takes a shared grant
   * (readers), which coexist, none beside an exclusive one (the default). */
  async acquire(key, holder, { ttl, wait, requestId, lockDelay, signal, value, timeoutMs, limit, mode } = {}) {
    const body = { key, holder, request_id: requestId ?? newRequestId() };
    if (value) body.value = value;
    if (limit !== undefined) body.limit = limit;
    if (mode) body.mode = mode;
    if (ttl !== undefined) body.ttl = durationText(ttl);
    if (wait) body.wait = durationText(wait);
    if (lockDelay) body.lock_delay = durationText(lockDelay);
    const waitMs = wait ? parseDuration(body.wait) : 0;
    return grantOf(await this.#do('POST', '/v1/acquire', body, { write: true, signal, extraMs: waitMs, timeoutMs: timeoutMs ?? this.timeoutMs + waitMs }));
  }

  /** Takes every key of keys (1 to 64, distinct) for holder in one step,
   * or none: a grant per key, in order, each key its own lock with its own
   * token. Rejects with code "held" naming the first key held by someone
   * else; with wait, waits holding none of them. */
  async acquireMulti(keys, holder, { ttl, wait, requestId, signal, timeoutMs } = {}) {
    const body = { keys, holder, request_id: requestId ?? newRequestId() };
    if (ttl !== undefined) body.ttl = durationText(ttl);
    if (wait) body.wait = durationText(wait);
    const waitMs = wait ? parseDuration(body.wait) : 0;
    const out = await this.#do('POST', '/v1/acquire/multi', body, { write: true, signal, extraMs: waitMs, timeoutMs: timeoutMs ?? this.timeoutMs + waitMs });
    return (out.grants ?? []).map(grantOf);
  }

  /** Extends the lease of each of a set of holder's grants, all or none:
   * grants is what acquireMulti resolved to, or [key, token] pairs (1 to
   * 64, distinct keys). A set naming a grant that is not live rejects as a
   * renew of it alone would, the key named in the message, and renews
   * none. Resolves to a grant per key, in order. */
  async renewMulti(grants, holder, { signal, timeoutMs } = {}) {
    const body = { keys: grantRefs(grants), holder, request_id: newRequestId() };
    const out = await this.#do('POST', '/v1/renew/multi', body, { write: true, signal, timeoutMs });
    return (out.renewed ?? []).map(grantOf);
  }

  /** Ends a set of holder's grants in one step, all or none: grants is
   * what acquireMulti resolved to, or [key, token] pairs (1 to 64, distinct
   * keys). A set naming a grant that is not the holder's live one rejects
   * as a release of it alone would, the key named in the message, and ends
   * none. Safe to repeat as release is: the request id (made when not
   * given) is the same on every attempt. Resolves to the released grants. */
  async releaseMulti(grants, holder, { signal, requestId } = {}) {
    const body = { keys: grantRefs(grants), holder, request_id: requestId ?? newRequestId() };
    const out = await this.#do('POST', '/v1/release/multi', body, { write: true, signal });
    return out.released ?? [];
  }

  /** Extends one grant's lease; the answer carries the server's TTL. */
  async renew(key, holder, token, { signal, timeoutMs } = {}) {
    const body = { key, holder, token: String(token), request_id: newRequestId() };
    return grantOf(await this.#do('POST', '/v1/renew', body, { write: true, signal, timeoutMs }));
  }

  /** Ends a grant. Safe to repeat: the request id (made when not given) is
   * the same on every attempt, and the cluster applies it once, so a retry
   * after a lost answer is answered with the grant the first attempt ended,
   * never an effect on a later grant. */
  async release(key, holder, token, { signal, requestId } = {}) {
    const body = { key, holder, token: String(token), request_id: requestId ?? newRequestId() };
    return this.#do('POST', '/v1/release', body, { write: true, signal });
  }

  /** Is token the key's current live grant? Fails closed: never throws;
   * { allow: false, reason: "malformed" | "unavailable" | ... } otherwise. */
  async verify(key, token, { holder, signal, timeoutMs } = {}) {
    const text = token instanceof FencingToken ? token.toString() : String(token);
    if (!FencingToken.parse(text)) return { allow: false, reason: 'malformed' };
    const deadline = Date.now() + (timeoutMs ?? this.timeoutMs);
    const body = { key, token: text };
    if (holder) body.holder = holder;
    let backoff = 20;
    for (;;) {
      let out;
      try {
        out = await this.#do('POST', '/v1/verify', body, { write: false, signal, deadline });
      } catch (err) {
        if (err instanceof FencedError && err.status === 400) return { allow: false, reason: 'malformed' };
        return { allow: false, reason: 'unavailable' };
      }
      if (out.reason !== 'unavailable') {
        return {
          allow: out.allow === true && out.reason === 'ok',
          reason: out.reason,
          currentToken: out.current_token ? FencingToken.parse(out.current_token) : null,
          holder: out.holder ?? '',
        };
      }
      if (Date.now() + backoff > deadline || signal?.aborted) return { allow: false, reason: 'unavailable' };
      await sleep(backoff);
      backoff = Math.min(2 * backoff, 500);
      this.preferred = (this.preferred + 1) % this.endpoints.length;
    }
  }

  /** One key's state, read linearizably. */
  async key(key) {
    const d = await this.#do('GET', `/v1/keys/${encodeURIComponent(key)}`, undefined, { write: false });
    return { ...d, token: FencingToken.parse(d.token) };
  }

  /** The status of the first node that answers. */
  async status() { return this.#do('GET', '/v1/cluster', undefined, { write: false }); }

  /**
   * Acquires key and keeps it alive: a FencedLease whose signal aborts
   * before the server could grant the key to anyone else, and when the
   * caller's signal aborts. Release it with release().
   */
  async lease(key, { ttl = 10000, holder, signal, wait, marginMs, value } = {}) {
    return FencedLease.acquire(this, key, { ttl, holder: holder ?? `js-${newRequestId()}`, signal, wait, marginMs, value });
  }

  /**
   * The changes of key, or of every key with prefix (neither: every key),
   * from the current state or after log index from: an async iterator of
   * events. See FencedWatch.
   */
  watch({ key, prefix, from, progressMs, signal } = {}) {
    return new FencedWatch(this, { key, prefix, from, progressMs, signal });
  }

  /** The candidate holder in the election named by key name. See FencedElection. */
  election(name, { holder, ttl = 10000, marginMs, value } = {}) {
    return new FencedElection(this, name, { holder: holder ?? `js-${newRequestId()}`, ttl, marginMs, value });
  }

  /**
   * A token source backed by the cluster: next(key) resolves to the token
   * of a fresh grant (acquired, then released at once), one grant per
   * call, so tokens are strictly increasing per key across every caller.
   */
  tokenSource({ holder, ttl = 1000, wait } = {}) {
    const client = this;
    const who = holder ?? `token-source-${newRequestId()}`;
    return {
      async next(key) {
        const g = await client.acquire(key, who, { ttl, wait });
        try {
          await client.release(key, who, g.token);
        } catch { /* the grant ends by its TTL anyway */ }
        return g.token;
      },
    };
  }

  #learnLeader(addr, answered) {
    let i = addr ? this.endpoints.findIndex((e) => e.endsWith(`://${addr}`)) : -1;
    if (i < 0) i = this.endpoints.indexOf(answered);
    if (i >= 0) this.preferred = i;
  }

  async #do(method, path, body, { write, signal, deadline, timeoutMs, extraMs = 0 }) {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const end = deadline ?? Date.now() + (timeoutMs ?? this.timeoutMs);
    let unknown = false;
    let backoff = 20;
    const start = this.preferred;
    let last;
    for (let attempt = 0; ; attempt++) {
      const ep = this.endpoints[(start + attempt) % this.endpoints.length];
      try {
        return await this.#once(ep, method, path, data, Math.min(end - Date.now(), this.attemptTimeoutMs + extraMs), signal);
      } catch (err) {
        // An attempt cut short by the deadline says less than the failure
        // before it (a TLS alert, a refused connection): that one is kept
        // as the reason.
        if (!(last && err instanceof TransportError && (err.code === 'ABORT_ERR' || err.code === 'AbortError') && Date.now() >= end)) last = err;
        if (err instanceof FencedError) {
          if (err.code === 'outcome_unknown') unknown = true;
          else if (!SAFE_TO_RETRY.has(err.code)) {
            if (unknown && write) {
              // An earlier attempt may have been committed, and be why this
              // one was refused: not a definite no.
              throw new UnknownOutcomeError(`${err.message} (an earlier attempt may have been committed)`, { status: err.status, body: err.body });
            }
            throw err;
          }
        } else if (err instanceof TransportError) {
          if (err.sent && write) unknown = true;
        } else {
          throw err; // not a failure of the network or the node: a bug
        }
      }
      if (signal?.aborted || Date.now() >= end) {
        if (unknown) throw new UnknownOutcomeError(`outcome unknown: ${last?.message}`, { cause: last });
        throw new UnavailableError(`cluster unavailable: ${last?.message}`, { cause: last });
      }
      if ((attempt + 1) % this.endpoints.length === 0) {
        await sleep(Math.max(0, Math.min(backoff, end - Date.now())));
        backoff = Math.min(2 * backoff, 500);
      }
    }
  }

  async #once(endpoint, method, path, data, ms, signal) {
    const signals = [AbortSignal.timeout(Math.max(50, Math.ceil(ms)))];
    if (signal) signals.push(signal);
    const headers = { accept: 'application/json' };
    if (data !== undefined) headers['content-type'] = 'application/json';
    if (this.bearer) headers.authorization = `Bearer ${this.bearer}`;
    const resp = await this.transport.request(endpoint + path, { method, body: data, headers, signal: anySignal(signals) });
    const text = resp.text;
    this.#learnLeader(resp.headers[LEADER_HEADER], endpoint);
    let out = null;
    try { out = text ? JSON.parse(text) : {}; } catch { /* not JSON */ }
    if (resp.status < 200 || resp.status > 299) {
      const code = out?.code || `http_${resp.status}`;
      throw new FencedError(`${out?.message ?? text.slice(0, 200)} (${code})`, { code, status: resp.status, body: out ?? {} });
    }
    if (out === null || typeof out !== 'object') throw new Error(`${endpoint}: the answer is not a JSON object`);
    return out;
  }

  /** Closes idle connections (the client stays usable). */
  close() { this.transport.close(); }
}
