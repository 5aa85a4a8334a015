// An election on a key, as the Go client's Election: the leader is the
// holder of the key's grant, and the grant's token is its term of office.

import { FencedLease, LOSE } from './lease.js';
import { FencedError, NoLeaderError, NotLeadingError } from './errors.js';

// How long one acquire of a campaign waits at the server: below the client's
// default timeout, so a wait never looks like a failure.
const CAMPAIGN_WAIT_MS = 15000;

// A campaign tries again after these: someone else leads, or the cluster
// could not answer. Anything else (bad input, credentials) is thrown.
const WAIT_AGAIN = new Set(['held', 'lock_delay']);
const RETRY = new Set(['not_leader', 'not_ready', 'not_member', 'busy', 'shutting_down', 'unavailable', 'outcome_unknown']);

// A proclaim refused with one of these found the leadership over.
const ENDED = new Set(['grant_ended', 'held', 'not_holder', 'stale_token', 'expired']);

const tok = (t) => t?.value ?? 0n;

/** Resolves after ms, or rejects with signal's reason when it aborts. */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) { reject(signal.reason); return; }
    const t = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve(); }, ms);
    const onAbort = () => { clearTimeout(t); reject(signal.reason); };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Turns watch events and reads of an election's key into leader changes,
 * never going back to an older leadership. */
export class LeaderObserver {
  constructor(name) { this.name = name; this.last = null; }

  event(ev) {
    // The end of a lock-delay is news for candidates, not observers: the
    // expiry before it already said nobody leads.
    if (['sync', 'reset', 'error', 'lock_delay_ended'].includes(ev.type)) return null;
    if (ev.type === 'state' && ev.state === 'absent') {
      // The key does not exist: news only when a leader was reported (its
      // leadership ended, and the key was forgotten since).
      const last = this.last;
      return last && last.holder ? this.offer({ name: this.name, holder: '', token: last.token, value: '', index: ev.index }) : null;
    }
    const held = ev.state === 'held';
    return this.offer({ name: this.name, holder: held ? ev.holder : '', token: ev.token, value: held ? ev.value : '', index: ev.index });
  }

  offer(l) {
    const last = this.last;
    if (last) {
      if (l.index && last.index && l.index < last.index) return null; // older than what was reported
      if (tok(l.token) < tok(last.token)) return null;
      if (tok(l.token) === tok(last.token)) {
        if (l.holder === last.holder && l.value === last.value) return null;
        if (last.holder === '' && l.holder !== '') return null; // a leadership that ended stays ended
      }
    }
    this.last = l;
    return l;
  }
}

/**
 * One candidate (holder) in the election named by a key. campaign()
 * resolves once this candidate leads; token is then the term of office, to
 * send with every write to a fenced resource, and signal aborts when the
 * leadership is lost, could be (the lease's deadline, on this process's
 * clock), or is resigned.
 */
export class FencedElection {
  #client; #lease = null;

  constructor(client, name, { holder, ttl = 10000, marginMs, value = '' } = {}) {
    if (typeof name !== 'string' || name === '') throw new TypeError(`an election is named by a non-empty key, not ${String(name)}`);
    if (marginMs !== undefined && !(marginMs >= 0 && marginMs < ttl)) throw new TypeError(`marginMs ${marginMs} must be in [0, ttl)`);
    this.#client = client;
    this.name = name;
    this.holder = holder;
    this.ttl = ttl;
    this.marginMs = marginMs;
    this.value = value ?? '';
  }

  /** The leadership's FencedLease, or null. */
  get lease() { return this.#lease; }

  /** The term of office, or null when this candidate never led. */
  get token() { return this.#lease?.token ?? null; }

  /** Aborts when the leadership is lost or resigned; aborted already when
   * this candidate does not lead. */
  get signal() { return this.#lease?.signal ?? AbortSignal.abort(new NotLeadingError('not leading')); }

  /** Whether this candidate leads now, by the lease's clock. */
  leading() { return this.#lease !== null && this.#lease.valid(); }

  /** Resolves once this candidate leads, waiting in the key's queue while
   * someone else does (and through a lock-delay); rejects with the
   * signal's reason when it aborts first. The signal bounds the campaign,
   * not the leadership it won (as the Go client's Campaign(ctx)). */
  async campaign({ signal } = {}) {
    if (this.leading()) return this;
    let backoff = 50;
    for (;;) {
      signal?.throwIfAborted();
      try {
        this.#lease = await FencedLease.acquire(this.#client, this.name, {
          ttl: this.ttl, holder: this.holder, wait: CAMPAIGN_WAIT_MS, marginMs: this.marginMs, value: this.value || undefined, acquireSignal: signal,
        });
        return this;
      } catch (err) {
        signal?.throwIfAborted();
        if (!(err instanceof FencedError)) throw err;
        if (WAIT_AGAIN.has(err.code)) backoff = 50; // someone leads: wait in the queue again at once
        else if (!RETRY.has(err.code)) throw err;
      }
      await sleep(backoff, signal);
      backoff = Math.min(2 * backoff, 2000);
    }
  }

  /** Ends the leadership, so that another candidate is elected at once. */
  async resign() {
    const lease = this.#lease;
    this.#lease = null;
    if (lease) await lease.release();
  }

  /**
   * Publishes value for the leadership, keeping its token. Rejects with
   * NotLeadingError, publishing nothing, when the leadership ended. The
   * update is an acquire with the request id that made the grant: fenced
   * answers it with the grant while it lives and refuses it once the grant
   * ended, so a proclaim never makes a new grant, even when the key is free.
   */
  async proclaim(value) {
    const lease = this.#lease;
    if (!lease || !lease.valid()) throw new NotLeadingError(`${this.holder} does not lead ${this.name}: nothing proclaimed`);
    let g;
    try {
      g = await this.#client.acquire(this.name, this.holder, {
        ttl: lease.grant.ttlMs, requestId: lease.requestId, value: value || undefined, timeoutMs: Math.max(50, lease.deadline - performance.now()),
      });
    } catch (err) {
      if (err instanceof FencedError && ENDED.has(err.code)) {
        lease[LOSE](new NotLeadingError(`the grant ended: ${err.message}`));
        throw new NotLeadingError(`the leadership of token ${lease.token} ended: ${err.message}`, { cause: err });
      }
      throw err;
    }
    if (!g.token.equals(lease.token)) {
      // Only a server without request ids would do this: the grant is not
      // this leadership's, so it is given back, not kept.
      await this.#client.release(this.name, this.holder, g.token).catch(() => {});
      lease[LOSE](new NotLeadingError('the grant ended'));
      throw new NotLeadingError(`the leadership of token ${lease.token} ended`);
    }
    this.value = value ?? '';
  }

  /** The current leader, read linearizably; rejects with NoLeaderError when
   * nobody holds the key. */
  async leader() {
    let k;
    try {
      k = await this.#client.key(this.name);
    } catch (err) {
      if (err instanceof FencedError && err.code === 'unknown_key') throw new NoLeaderError(`nobody leads ${this.name}`);
      throw err;
    }
    if (k.state !== 'held') throw new NoLeaderError(`nobody leads ${this.name} (the last grant ${k.state})`);
    return { name: this.name, holder: k.holder, token: k.token, value: k.value ?? '', index: k.index ?? 0 };
  }

  /**
   * The leader and every change of it (a new leader, a new value, nobody:
   * holder ''), from a watch of the key, as an async iterator; never a
   * leader whose token is lower than one it reported. After every reset of
   * the watch (lost history) it reads the key again, so a change in the gap
   * (even a key forgotten since) is reported. close(), return() (a break out
   * of for await) or the signal ends it, also while it waits.
   */
  observe({ signal } = {}) {
    return new LeaderObservation(this.#client, this.name, { signal });
  }
}

/** What FencedElection.observe returns: an async iterator of leaders. */
export class LeaderObservation {
  #client; #name; #watch; #ob; #gen;

  constructor(client, name, { signal } = {}) {
    this.#client = client;
    this.#name = name;
    this.#watch = client.watch({ key: name, signal });
    this.#ob = new LeaderObserver(name);
    this.#gen = this.#run();
  }

  /** The FencedError of a watch refused for good, once the observation ended. */
  get error() { return this.#watch.error; }

  [Symbol.asyncIterator]() { return this; }

  next() { return this.#gen.next(); }

  return(value) {
    this.close();
    return this.#gen.return(value);
  }

  /** Ends the observation, also one waiting for a change. */
  close() { this.#watch.close(); }

  async* #run() {
    for await (const ev of this.#watch) {
      const l = ev.type === 'reset' ? await this.#reread() : this.#ob.event(ev);
      if (l) yield l;
    }
  }

  async #reread() {
    const ob = this.#ob;
    let k;
    try {
      k = await this.#client.key(this.#name);
    } catch (err) {
      if (err instanceof FencedError && err.code === 'unknown_key') {
        return ob.last?.holder ? ob.offer({ name: this.#name, holder: '', token: ob.last.token, value: '', index: 0 }) : null;
      }
      if (err instanceof FencedError) return null; // the fresh stream's state follows
      throw err;
    }
    const held = k.state === 'held';
    return ob.offer({ name: this.#name, holder: held ? k.holder : '', token: k.token, value: held ? (k.value ?? '') : '', index: k.index ?? 0 });
  }
}
