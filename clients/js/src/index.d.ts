// Types of fenced-client (hand-written).

/** The highest token, 2^63-1. */
export declare const MAX_TOKEN: bigint;

/** Anything a token compares with: a FencingToken, a bigint, a safe integer or strict decimal text. */
export type TokenLike = FencingToken | bigint | number | string;

/** A fencing token (epoch<<32 | seq): kept as bigint, sent as decimal text. */
export declare class FencingToken {
  /** Throws RangeError unless 1 <= value <= 2^63-1 with a non-zero seq; TypeError unless a bigint. */
  constructor(value: bigint);
  readonly value: bigint;
  /** The strict decimal text fenced takes (fence.Parse: ASCII digits, no sign or leading zero, at most 2^63-1, seq not 0), else null. */
  static parse(text: string): FencingToken | null;
  /** -1, 0 or 1; throws TypeError for anything that is not a TokenLike. */
  compare(other: TokenLike): -1 | 0 | 1;
  equals(other: TokenLike): boolean;
  /** Strictly higher than other: a later grant. */
  isNewerThan(other: TokenLike): boolean;
  readonly epoch: bigint;
  readonly seq: bigint;
  toString(): string;
  toJSON(): string;
}

/** A duration: milliseconds, or Go duration text ("10s"). */
export type Duration = number | string;

export interface Grant {
  key: string;
  holder: string;
  token: FencingToken;
  /** The TTL the server answered, in milliseconds. */
  ttlMs: number;
  renewed: boolean;
  /** What the holder published with the grant ('' when nothing). */
  value: string;
  /** The grant's proof (a JWS a FenceGuard with keys checks offline; '' when the leader's key was not yet published). */
  proof: string;
  /** The key's limit when the grant is a semaphore permit (0 otherwise). */
  limit: number;
  /** 'shared' for a shared grant ('' otherwise). */
  mode: string;
}

export interface Verdict {
  allow: boolean;
  reason: 'ok' | 'superseded' | 'released' | 'expired' | 'unknown_key' | 'not_granted_yet' | 'holder_mismatch' | 'malformed' | 'unavailable' | string;
  currentToken?: FencingToken | null;
  holder?: string;
}

export interface ClientOptions {
  /** "host:port" or URLs, or one comma-separated string. */
  endpoints: string[] | string;
  /** A bearer token. */
  token?: string;
  /** The deadline of one call, retries included (default 30000). */
  timeoutMs?: number;
  /** The most one attempt on one node may take (default 5000). */
  attemptTimeoutMs?: number;
  /** PEM of the CA that signs the nodes' certificates (node:https's ca). With ca or cert, every endpoint is https. */
  ca?: string | Buffer | Array<string | Buffer>;
  /** PEM of a client certificate (mutual TLS), with its key. */
  cert?: string | Buffer | Array<string | Buffer>;
  key?: string | Buffer | Array<string | Buffer>;
  /** Send token over plain http to other hosts than this one (default false: only https, or a loopback address). */
  insecure?: boolean;
}

export interface LeaseOptions {
  ttl?: Duration;
  holder?: string;
  signal?: AbortSignal;
  wait?: Duration;
  marginMs?: number;
  /** Published with the grant. */
  value?: string;
}

/** A lease: the signal warns the holder; the resource checks the token. */
export interface FencedLeaseLike {
  signal: AbortSignal;
  token: FencingToken;
}

export declare class FencedLease implements FencedLeaseLike {
  readonly key: string;
  readonly holder: string;
  readonly token: FencingToken;
  readonly grant: Grant;
  /** The request id of the acquire that made the grant. */
  readonly requestId: string;
  /** Aborts before the server could grant the key to anyone else. */
  readonly signal: AbortSignal;
  /** performance.now() time until which the lease is known to be held. */
  readonly deadline: number;
  valid(): boolean;
  release(): Promise<void>;
}

/** A source of fencing tokens: one grant per call. */
export interface TokenSource {
  next(key: string): Promise<FencingToken>;
}

export declare class FencedClient {
  constructor(options: ClientOptions);
  readonly endpoints: string[];
  acquire(key: string, holder: string, options?: { ttl?: Duration; wait?: Duration; requestId?: string; lockDelay?: Duration; signal?: AbortSignal; value?: string; timeoutMs?: number; limit?: number; mode?: 'shared' | 'exclusive' }): Promise<Grant>;
  /** Every key for holder in one step, or none (code "held" naming the key). */
  acquireMulti(keys: string[], holder: string, options?: { ttl?: Duration; wait?: Duration; requestId?: string; signal?: AbortSignal; timeoutMs?: number }): Promise<Grant[]>;
  /** Every grant of the set renewed, or none (the refusal names the key). */
  renewMulti(grants: Array<Grant | [string, FencingToken | string]>, holder: string, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<Grant[]>;
  /** Every grant of the set released in one step, or none (the refusal names the key); requestId as for release. */
  releaseMulti(grants: Array<Grant | [string, FencingToken | string]>, holder: string, options?: { signal?: AbortSignal; requestId?: string }): Promise<Array<Record<string, unknown>>>;
  renew(key: string, holder: string, token: FencingToken | string, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<Grant>;
  /** requestId (made when absent) is applied once: a repeat is answered with the grant the first release ended. */
  release(key: string, holder: string, token: FencingToken | string, options?: { signal?: AbortSignal; requestId?: string }): Promise<unknown>;
  verify(key: string, token: FencingToken | string, options?: { holder?: string; signal?: AbortSignal; timeoutMs?: number }): Promise<Verdict>;
  key(key: string): Promise<Record<string, unknown> & { token: FencingToken }>;
  status(): Promise<Record<string, unknown>>;
  lease(key: string, options?: LeaseOptions): Promise<FencedLease>;
  tokenSource(options?: { holder?: string; ttl?: Duration; wait?: Duration }): TokenSource;
  watch(options?: WatchOptions): FencedWatch;
  election(name: string, options?: ElectionOptions): FencedElection;
  /** Closes idle connections; the client stays usable. */
  close(): void;
}

export interface WatchOptions {
  /** One key; or prefix (every key starting with it; neither: every key). */
  key?: string;
  prefix?: string;
  /** Resume after this log index; absent: start with the current state. */
  from?: number;
  /** How often a quiet stream confirms it is current; three of them without a byte and the stream is resumed elsewhere. */
  progressMs?: number;
  signal?: AbortSignal;
}

export interface WatchEvent {
  /** A change (granted, renewed, released, force_released, expired, lock_delay_ended, handed_off), or state, sync, reset, error. */
  type: string;
  /** The log index of the change. */
  index: number;
  key?: string;
  holder?: string;
  token?: FencingToken | null;
  state?: string;
  ttlMs?: number | null;
  lockDelayMs?: number | null;
  prevHolder?: string;
  prevToken?: FencingToken | null;
  ended?: string;
  /** Of reset (lagged, restored, compacted) and error. */
  reason?: string;
  value?: string;
}

export declare class FencedWatch implements AsyncIterableIterator<WatchEvent> {
  /** The id of the last event delivered: `from` for a later watch. */
  readonly lastIndex: number;
  /** The FencedError of a watch refused for good. */
  readonly error: FencedError | null;
  /** The last failure of a stream, resumed elsewhere since. */
  readonly lastError: Error | null;
  next(): Promise<IteratorResult<WatchEvent>>;
  return(value?: unknown): Promise<IteratorResult<WatchEvent>>;
  [Symbol.asyncIterator](): FencedWatch;
  close(): void;
}

export interface ElectionOptions {
  holder?: string;
  /** The TTL of the leader's grant, in milliseconds (default 10000). */
  ttl?: number;
  marginMs?: number;
  /** Published with the leadership. */
  value?: string;
}

/** An election's leader as observed; holder '' when nobody leads. */
export interface Leader {
  name: string;
  holder: string;
  token: FencingToken | null;
  value: string;
  index: number;
}

export declare class LeaderObservation implements AsyncIterableIterator<Leader> {
  readonly error: FencedError | null;
  next(): Promise<IteratorResult<Leader>>;
  return(value?: unknown): Promise<IteratorResult<Leader>>;
  [Symbol.asyncIterator](): LeaderObservation;
  close(): void;
}

export declare class FencedElection {
  readonly name: string;
  readonly holder: string;
  readonly value: string;
  readonly lease: FencedLease | null;
  /** The term of office, or null. */
  readonly token: FencingToken | null;
  /** Aborts when the leadership is lost or resigned; aborted when not leading. */
  readonly signal: AbortSignal;
  leading(): boolean;
  /** The signal bounds the campaign, not the leadership it won. */
  campaign(options?: { signal?: AbortSignal }): Promise<FencedElection>;
  /** Rejects with NotLeadingError, publishing nothing, when not leading. */
  proclaim(value: string): Promise<void>;
  /** Rejects with NoLeaderError when nobody leads. */
  leader(): Promise<Leader>;
  observe(options?: { signal?: AbortSignal }): LeaderObservation;
  resign(): Promise<void>;
}

export declare class FenceGuard {
  /** With keys, proofs are checked before tokens are compared; requireProof refuses a token without one. */
  constructor(options?: { keys?: KeySet; cluster?: string; requireProof?: boolean });
  /** token: a FencingToken, strict decimal text, a bigint or a safe integer; anything else throws StaleTokenError. A bad proof throws ProofError. */
  admit(key: string, token: FencingToken | string | bigint | number, proof?: string): FencingToken;
  write<T>(key: string, token: FencingToken | string | bigint | number, write: () => T, proof?: string): T;
  highest(key: string): FencingToken | null;
}

/** The cluster's public signing keys (GET /v1/signing-keys), pinned. */
export declare class KeySet {
  constructor(jwks: string | object);
  static load(path: string): KeySet;
  static fetch(base: string, options?: { signal?: AbortSignal }): Promise<KeySet>;
  readonly cluster: string;
  readonly size: number;
}
export declare const PROOF_TYPE: 'fenced-grant+jwt';
export declare const MAX_PROOF_LEN: 2048;
export interface ProofClaims { key: string; token: string; holder: string; cluster: string; kid: string; iat: number; ttl_ms: number }
export declare function verifyProof(proof: string | undefined, keys: KeySet,
  want: { key: string; token: FencingToken | string; cluster?: string; holder?: string }): ProofClaims;
export type ProofReason = 'proof_missing' | 'proof_malformed' | 'proof_algorithm' | 'proof_unknown_signer' | 'proof_signature'
  | 'proof_wrong_key' | 'proof_wrong_token' | 'proof_wrong_holder' | 'proof_wrong_cluster';
export declare class ProofError extends Error {
  readonly code: 'invalid_proof';
  readonly reason: ProofReason;
  readonly key: string;
  readonly token: unknown;
}

export declare class FencedError extends Error {
  readonly code: string;
  readonly status: number;
  readonly body: Record<string, unknown>;
  readonly heldBy: string;
}
export declare class UnavailableError extends FencedError {}
export declare class UnknownOutcomeError extends FencedError {}
export declare class NotLeadingError extends FencedError {}
export declare class NoLeaderError extends FencedError {}
export declare class StaleTokenError extends Error {
  readonly code: 'stale_token';
  readonly key: string;
  readonly token: FencingToken | string;
  readonly highest?: bigint;
}

export declare function newRequestId(): string;
export declare function parseDuration(text: string): number;
export declare function durationText(ms: Duration): string;
