// Fencing tokens: epoch<<32 | seq, kept as bigint, carried as decimal text
// (never as a JSON number, which loses precision above 2^53).

/** The highest token, 2^63-1: every token fits a signed 64-bit integer. */
export const MAX_TOKEN = 2n ** 63n - 1n;

// At most 19 digits: longer text is refused before BigInt() spends work on
// it (a hostile peer can send megabytes of digits).
const DECIMAL = /^[1-9][0-9]{0,18}$/;

/** Why value is not a token fenced could grant, or '' when it is one. */
function fault(value) {
  if (value < 1n) return `${value} is below 1`;
  if (value > MAX_TOKEN) return `${value} is above 2^63-1`;
  if ((value & 0xffffffffn) === 0n) return `${value} has seq 0, which is never granted`;
  return '';
}

/** The bigint of a token given as a FencingToken, a bigint, a safe integer
 * or its strict decimal text; TypeError for anything else. */
function valueOf(other) {
  if (other instanceof FencingToken) return other.value;
  if (typeof other === 'bigint') return other;
  if (typeof other === 'number' && Number.isSafeInteger(other)) return BigInt(other);
  if (typeof other === 'string') {
    const t = FencingToken.parse(other);
    if (t) return t.value;
  }
  throw new TypeError(`not a fencing token to compare with: ${typeof other === 'string' ? JSON.stringify(other) : String(other)}`);
}

/** A fencing token. The resource checks it: a write whose token is lower
 * than one it has seen for the key is refused. */
export class FencingToken {
  /** @param {bigint} value in 1..2^63-1 with a non-zero seq (RangeError otherwise) */
  constructor(value) {
    if (typeof value !== 'bigint') throw new TypeError(`a fencing token is a bigint, not ${typeof value} ${String(value)}`);
    const why = fault(value);
    if (why) throw new RangeError(`not a fencing token: ${why}`);
    this.value = value;
    Object.freeze(this);
  }

  /** Parses the strict decimal text fenced sends and takes (fence.Parse):
   * ASCII digits, no sign, space or leading zero, at most 2^63-1, a
   * non-zero seq. Anything else is null. */
  static parse(text) {
    if (typeof text !== 'string' || !DECIMAL.test(text)) return null;
    const value = BigInt(text);
    return fault(value) ? null : new FencingToken(value);
  }

  /** -1, 0 or 1 as this token is lower than, equal to or higher than other
   * (a FencingToken, a bigint, a safe integer or decimal text). */
  compare(other) {
    const o = valueOf(other);
    return this.value < o ? -1 : this.value > o ? 1 : 0;
  }

  equals(other) { return this.compare(other) === 0; }

  /** Whether this token is strictly higher than other: a later grant. */
  isNewerThan(other) { return this.compare(other) === 1; }

  /** The epoch of the grant (the high 32 bits). */
  get epoch() { return this.value >> 32n; }

  /** The per-key sequence number inside the epoch (the low 32 bits). */
  get seq() { return this.value & 0xffffffffn; }

  /** The decimal text, the only wire form. */
  toString() { return this.value.toString(10); }

  toJSON() { return this.toString(); }
}
