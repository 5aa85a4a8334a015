// Fencing tokens: unsigned 64-bit integers, kept as bigint, carried as
// decimal text (never as a JSON number, which loses precision above 2^53).

const DECIMAL = /^\d+$/;

/** A fencing token. The resource checks it: a write whose token is lower
 * than one it has seen for the key is refused. */
export class FencingToken {
  /** @param {bigint} value */
  constructor(value) {
    if (typeof value !== 'bigint' || value < 0n) {
      throw new TypeError(`a fencing token is a non-negative bigint, not ${String(value)}`);
    }
    this.value = value;
    Object.freeze(this);
  }

  /** Parses decimal text: ASCII digits only (/^\d+$/), else null. */
  static parse(text) {
    if (typeof text !== 'string' || !DECIMAL.test(text)) return null;
    return new FencingToken(BigInt(text));
  }

  /** -1, 0 or 1 as this token is lower than, equal to or higher than other. */
  compare(other) {
    const o = other instanceof FencingToken ? other.value : other;
    return this.value < o ? -1 : this.value > o ? 1 : 0;
  }

  equals(other) { return this.compare(other) === 0; }

  /** The epoch of the grant (the high 32 bits). */
  get epoch() { return this.value >> 32n; }

  /** The per-key sequence number inside the epoch (the low 32 bits). */
  get seq() { return this.value & 0xffffffffn; }

  /** The decimal text, the only wire form. */
  toString() { return this.value.toString(10); }

  toJSON() { return this.toString(); }
}
