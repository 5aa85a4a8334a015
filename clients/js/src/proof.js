// Offline checks of a grant's proof: a JWS compact serialization signed
// with EdDSA/Ed25519 by the fenced leader that made the grant (the format
// is fence/proof's in the Go module). node:crypto only.

import { createPublicKey, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { FencingToken } from './token.js';

/** The only JWS "typ" of a proof. */
export const PROOF_TYPE = 'fenced-grant+jwt';
/** The longest proof accepted, in bytes. */
export const MAX_PROOF_LEN = 2048;

/** A refused proof; reason is one of proof_missing, proof_malformed,
 * proof_algorithm, proof_unknown_signer, proof_signature, proof_wrong_key,
 * proof_wrong_token, proof_wrong_holder, proof_wrong_cluster (the same
 * names as the Go guards and fencectl verify --offline). */
export class ProofError extends Error {
  constructor(reason, message, { key, token } = {}) {
    super(`${reason}: ${message}`);
    this.name = 'ProofError';
    this.code = 'invalid_proof';
    this.reason = reason;
    this.key = key;
    this.token = token;
  }
}

const B64URL = /^[A-Za-z0-9_-]*$/;

function b64url(part, what) {
  // Strict: base64url without padding, and no bits left over that another
  // encoding of the same bytes would set differently.
  if (!B64URL.test(part) || part.length % 4 === 1) throw new ProofError('proof_malformed', `${what} is not base64url`);
  const buf = Buffer.from(part, 'base64url');
  if (buf.toString('base64url') !== part) throw new ProofError('proof_malformed', `${what} is not canonical base64url`);
  return buf;
}

function json(buf, what) {
  try {
    const v = JSON.parse(buf.toString('utf8'));
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
    return v;
  } catch (e) {
    throw new ProofError('proof_malformed', `${what}: ${e.message}`);
  }
}

/** A pinned set of Ed25519 public keys by kid, read from a JWKS (the
 * answer of GET /v1/signing-keys, or fencectl signing-keys list -o json).
 * A key set that is not wholly Ed25519 public keys is refused. */
export class KeySet {
  #keys = new Map();

  constructor(jwks) {
    const doc = typeof jwks === 'string' ? JSON.parse(jwks) : jwks;
    if (!doc || !Array.isArray(doc.keys)) throw new Error('malformed key set: no "keys" array');
    for (const [i, k] of doc.keys.entries()) {
      if (k.kty !== 'OKP' || k.crv !== 'Ed25519' || typeof k.x !== 'string' || !k.kid || 'd' in k
        || (k.use !== undefined && k.use !== 'sig') || (k.alg !== undefined && k.alg !== 'EdDSA')) {
        throw new Error(`malformed key set: key ${i} is not an Ed25519 public signing key with a kid`);
      }
      if (Buffer.from(k.x, 'base64url').length !== 32) throw new Error(`malformed key set: key ${i}'s x is not 32 bytes`);
      if (this.#keys.has(k.kid)) throw new Error(`malformed key set: kid ${k.kid} appears twice`);
      this.#keys.set(k.kid, createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: k.x }, format: 'jwk' }));
    }
    /** The cluster's ID when the document names it (fenced's does). */
    this.cluster = typeof doc.cluster_id === 'string' ? doc.cluster_id : '';
  }

  /** Reads a JWKS file; an error names the file. */
  static load(path) {
    try {
      return new KeySet(readFileSync(path, 'utf8'));
    } catch (e) {
      throw new Error(`${path}: ${e.message}`);
    }
  }

  /** Fetches a node's /v1/signing-keys once (base: the node's URL). */
  static async fetch(base, { signal } = {}) {
    const resp = await fetch(`${base}/v1/signing-keys`, { signal });
    if (!resp.ok) throw new Error(`${base}/v1/signing-keys: ${resp.status}`);
    return new KeySet(await resp.text());
  }

  get size() { return this.#keys.size; }
  get(kid) { return this.#keys.get(kid); }
}

/**
 * Checks that proof is a genuine proof, by a key of keys, of the grant of
 * key with token (and cluster, holder when given); returns its claims or
 * throws ProofError. Reads no clock: a proof says fenced issued the token,
 * never that its lease is live.
 */
export function verifyProof(proof, keys, { key, token, cluster = '', holder = '' }) {
  const ctx = { key, token };
  const fail = (reason, msg) => { throw new ProofError(reason, msg, ctx); };
  if (proof === undefined || proof === null || proof === '') fail('proof_missing', 'no proof came with the token');
  if (typeof proof !== 'string') fail('proof_malformed', 'the proof is not text');
  if (Buffer.byteLength(proof) > MAX_PROOF_LEN) fail('proof_malformed', `longer than ${MAX_PROOF_LEN} bytes`);
  const parts = proof.split('.');
  if (parts.length !== 3) fail('proof_malformed', 'not three dot-separated parts');
  let header;
  try {
    header = json(b64url(parts[0], 'header'), 'header');
  } catch (e) { e.key = key; e.token = token; throw e; }
  const extra = Object.keys(header).filter((k) => !['alg', 'kid', 'typ'].includes(k));
  if (extra.length) fail('proof_malformed', `header member ${extra[0]} is not accepted`);
  if (header.alg !== 'EdDSA') fail('proof_algorithm', `alg ${JSON.stringify(header.alg)}`);
  if (header.typ !== PROOF_TYPE) fail('proof_algorithm', `typ ${JSON.stringify(header.typ)}`);
  if (typeof header.kid !== 'string' || !header.kid) fail('proof_malformed', 'header has no kid');
  const pub = keys ? keys.get(header.kid) : undefined;
  if (!pub) fail('proof_unknown_signer', `kid ${header.kid}`);
  let sig;
  try { sig = b64url(parts[2], 'signature'); } catch (e) { e.key = key; e.token = token; throw e; }
  if (sig.length !== 64) fail('proof_malformed', 'signature is not 64 bytes');
  if (!verify(null, Buffer.from(`${parts[0]}.${parts[1]}`), pub, sig)) fail('proof_signature', `does not verify with ${header.kid}`);
  let claims;
  try { claims = json(b64url(parts[1], 'payload'), 'payload'); } catch (e) { e.key = key; e.token = token; throw e; }
  if (claims.kid !== header.kid) fail('proof_malformed', 'payload kid differs from header kid');
  let signed;
  try { signed = FencingToken.parse(claims.token); } catch { fail('proof_malformed', 'payload token is not decimal text'); }
  const want = token instanceof FencingToken ? token : FencingToken.parse(String(token));
  if (claims.key !== key) fail('proof_wrong_key', `signed for key ${JSON.stringify(claims.key)}`);
  if (signed.value !== want.value) fail('proof_wrong_token', `signed for token ${signed}, presented with ${want}`);
  if (cluster && claims.cluster !== cluster) fail('proof_wrong_cluster', `signed by cluster ${JSON.stringify(claims.cluster)}`);
  if (holder && claims.holder !== holder) fail('proof_wrong_holder', `signed for holder ${JSON.stringify(claims.holder)}`);
  return claims;
}
