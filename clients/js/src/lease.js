// A lease kept alive in the background.

import { performance } from 'node:perf_hooks';
import { FencedError } from './errors.js';
import { newRequestId } from './ids.js';

/** The key of FencedLease's method that ends it without a request. */
export const LOSE = Symbol('fenced.lease.lose');

const RETRY = new Set(['not_leader', 'not_ready', 'not_member', 'busy', 'shutting_down', 'unavailable', 'outcome_unknown']);

/**
 * A grant kept alive by timers: { signal, token } plus release().
 *
 * signal aborts before the server could grant the key to anyone else: at
 * the deadline, the moment the last successful renewal (or the acquire) was
 * SENT, on the monotonic clock, plus the TTL the SERVER answered, minus a
 * margin (a tenth of that TTL by default); at once when a renewal is refused
 * (superseded, expired, released); and when the caller's signal aborts.
 *
 * A timer cannot fire in a process that is frozen (SIGSTOP, a debugger, a
 * stalled event loop): such a holder wakes up believing it holds the key.
 * So it checks valid() right before acting, and the resource checks the
 * token (FenceGuard): the resource is what refuses a frozen holder.
 */
export class FencedLease {
  #client; #controller; #timer; #deadlineTimer; #marginMs; #ttlMs = 0; #stopped = false;

  constructor(client, grant, { marginMs, signal }) {
    this.#client = client;
    this.key = grant.key;
    this.holder = grant.holder;
    this.token = grant.token;
    this.grant = grant;
    this.#marginMs = marginMs;
    this.#controller = new AbortController();
    /** @type {AbortSignal} */
    this.signal = this.#controller.signal;
    this.deadline = 0;
    if (signal) {
      if (signal.aborted) this.#lose(signal.reason);
      else signal.addEventListener('abort', () => this.#lose(signal.reason), { once: true });
    }
  }

  /** signal ends the acquire and, later, the lease; acquireSignal, when
   * given instead, ends the acquire alone. */
  static async acquire(client, key, { ttl, holder, signal, wait, marginMs, value, acquireSignal = signal }) {
    acquireSignal?.throwIfAborted();
    // The acquire's request id stays with the grant: an acquire with it
    // again (FencedElection.proclaim) updates this grant while it lives and
    // is refused once it ended, never answered with a new grant.
    const requestId = newRequestId();
    let sent = performance.now();
    let g = await client.acquire(key, holder, { ttl, wait, signal: acquireSignal, requestId, value });
    if (performance.now() - sent > g.ttlMs / 3) {
      // A waited acquire may return long after it was sent; the lease is
      // only known to run from the send, so renew to count from now.
      sent = performance.now();
      try {
        g = await client.renew(key, holder, g.token);
      } catch (err) {
        await client.release(key, holder, g.token).catch(() => {});
        throw err;
      }
    }
    const lease = new FencedLease(client, g, { marginMs, signal });
    lease.requestId = requestId;
    lease.#renewed(sent, g.ttlMs);
    lease.#schedule(g.ttlMs / 3);
    return lease;
  }

  /** True while the lease is held: not aborted and before the deadline,
   * checked on the clock now (not by a timer). */
  valid() { return !this.signal.aborted && performance.now() < this.deadline; }

  /** Stops the keepalive and ends the grant; a grant that had ended already
   * counts as released. */
  async release() {
    this.#lose(new Error('released'));
    try {
      await this.#client.release(this.key, this.holder, this.token);
    } catch (err) {
      if (!(err instanceof FencedError && (err.code === 'expired' || err.code === 'stale_token'))) throw err;
    }
  }

  #renewed(sent, ttlMs) {
    const margin = this.#marginMs ?? ttlMs / 10;
    this.#ttlMs = ttlMs;
    this.deadline = sent + ttlMs - margin;
    this.#armDeadline();
  }

  // A timer may fire a little before performance.now() reaches the
  // deadline: it then re-arms, so the deadline is never skipped.
  #armDeadline() {
    clearTimeout(this.#deadlineTimer);
    if (this.#stopped) return;
    this.#deadlineTimer = setTimeout(() => {
      if (performance.now() >= this.deadline) this.#lose(new Error('lease lost: could not renew before the deadline'));
      else this.#armDeadline();
    }, Math.max(1, Math.ceil(this.deadline - performance.now())));
    this.#deadlineTimer.unref?.();
  }

  #schedule(ms) {
    if (this.#stopped) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.#renew(), ms);
    this.#timer.unref?.();
  }

  async #renew() {
    if (this.#stopped) return;
    const sent = performance.now();
    if (sent >= this.deadline) {
      this.#lose(new Error('lease lost: could not renew before the deadline'));
      return;
    }
    try {
      const g = await this.#client.renew(this.key, this.holder, this.token,
        { signal: this.signal, timeoutMs: Math.max(50, this.deadline - sent) });
      if (this.#stopped) return;
      this.#renewed(sent, g.ttlMs);
      this.#schedule(g.ttlMs / 3);
    } catch (err) {
      if (this.#stopped) return;
      if (err instanceof FencedError && !RETRY.has(err.code)) {
        this.#lose(new Error(`lease lost: renewal refused: ${err.message}`));
        return;
      }
      this.#schedule(Math.min(this.#ttlMs / 3, 100));
    }
  }

  /** Ends the lease here without a request (the grant is known to have
   * ended). For the election, not part of the public API. */
  [LOSE](reason) { this.#lose(reason); }

  #lose(reason) {
    if (this.#stopped) return;
    this.#stopped = true;
    clearTimeout(this.#timer);
    clearTimeout(this.#deadlineTimer);
    this.#controller.abort(reason);
  }
}
