// The resource side of fencing: keep the highest token seen per key and
// refuse anything lower.

import { FencingToken } from './token.js';
import { StaleTokenError } from './errors.js';
import { verifyProof } from './proof.js';

/**
 * FenceGuard keeps, per key, the highest token a write came with. admit()
 * checks and raises it in one synchronous step (nothing else can run in
 * between on the event loop); equal tokens pass, so one grant may write many
 * times. A resource calls it right before applying a write, in the same
 * synchronous step as the write, or holds the returned value across an
 * await only where no other write to the key can interleave.
 */
export class FenceGuard {
  #highest = new Map();
  #keys;
  #cluster;
  #requireProof;

  /**
   * With keys (a KeySet pinned from the cluster's /v1/signing-keys), a
   * proof that comes with a token is checked before any token is compared,
   * and with requireProof a token without one is refused: a client that
   * sends a made-up higher token cannot raise the fence (ProofError, with
   * its reason). cluster defaults to the key set's.
   */
  constructor({ keys, cluster, requireProof = false } = {}) {
    if (requireProof && !keys) throw new Error('requireProof needs keys');
    this.#keys = keys;
    this.#cluster = cluster ?? keys?.cluster ?? '';
    this.#requireProof = requireProof;
  }

  /** Admits token for key (raising the fence) or throws StaleTokenError;
   * with keys, a ProofError for a proof missing where required or not
   * genuine. */
  admit(key, token, proof) {
    // Text, bigints and safe integers only: String() of an object, or of a
    // number past 2^53 that already lost its low digits, could spell a
    // valid token by accident.
    const t = token instanceof FencingToken ? token
      : typeof token === 'string' || typeof token === 'bigint' || Number.isSafeInteger(token) ? FencingToken.parse(String(token)) : null;
    if (!t) {
      throw new StaleTokenError(`malformed fencing token for ${key}: ${typeof token === 'string' ? JSON.stringify(token) : String(token)} is not `
        + 'decimal text of 1..2^63-1 without leading zeros and with a non-zero seq: refused', { key, token });
    }
    if (this.#keys && (this.#requireProof || (proof !== undefined && proof !== null && proof !== ''))) {
      verifyProof(proof, this.#keys, { key, token: t, cluster: this.#cluster });
    }
    const cur = this.#highest.get(key);
    if (cur !== undefined && t.value < cur) {
      throw new StaleTokenError(`token ${t} for ${key} is lower than ${cur}: refused`, { key, token: t, highest: cur });
    }
    this.#highest.set(key, t.value);
    return t;
  }

  /** Runs write() if token is admitted for key; write must be synchronous
   * or the caller must serialize writes to the key. */
  write(key, token, write, proof) {
    this.admit(key, token, proof);
    return write();
  }

  /** The highest token seen for key, or null. */
  highest(key) {
    const v = this.#highest.get(key);
    return v === undefined ? null : new FencingToken(v);
  }
}
