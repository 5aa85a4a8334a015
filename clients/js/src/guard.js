// The resource side of fencing: keep the highest token seen per key and
// refuse anything lower.

import { FencingToken } from './token.js';
import { StaleTokenError } from './errors.js';

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

  /** Admits token for key (raising the fence) or throws StaleTokenError. */
  admit(key, token) {
    // Text, bigints and safe integers only: String() of an object, or of a
    // number past 2^53 that already lost its low digits, could spell a
    // valid token by accident.
    const t = token instanceof FencingToken ? token
      : typeof token === 'string' || typeof token === 'bigint' || Number.isSafeInteger(token) ? FencingToken.parse(String(token)) : null;
    if (!t) {
      throw new StaleTokenError(`malformed fencing token for ${key}: ${typeof token === 'string' ? JSON.stringify(token) : String(token)} is not `
        + 'decimal text of 1..2^63-1 without leading zeros and with a non-zero seq: refused', { key, token });
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
  write(key, token, write) {
    this.admit(key, token);
    return write();
  }

  /** The highest token seen for key, or null. */
  highest(key) {
    const v = this.#highest.get(key);
    return v === undefined ? null : new FencingToken(v);
  }
}
