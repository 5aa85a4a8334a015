// Errors of the fenced client. A non-2xx answer becomes a FencedError whose
// code is the wire code ("held", "stale_token", "outcome_unknown", ...).

/** A refusal of the server or a failure to reach it. */
export class FencedError extends Error {
  constructor(message, { code = '', status = 0, body = {}, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'FencedError';
    this.code = code;
    this.status = status;
    this.body = body;
  }

  /** With code "held": who holds the key. */
  get heldBy() { return this.body?.held_by ?? ''; }
}

/** No node could serve the request; nothing was done. */
export class UnavailableError extends FencedError {
  constructor(message, opts = {}) { super(message, { code: 'unavailable', ...opts }); this.name = 'UnavailableError'; }
}

/** A write may or may not have been committed. The client retries such
 * writes itself (they are idempotent) and throws this only when its deadline
 * passes first. Never read it as "failed". */
export class UnknownOutcomeError extends FencedError {
  constructor(message, opts = {}) { super(message, { code: 'outcome_unknown', ...opts }); this.name = 'UnknownOutcomeError'; }
}

/** A resource refused a write whose token is lower than one it has seen. */
export class StaleTokenError extends Error {
  constructor(message, { key, token, highest } = {}) {
    super(message);
    this.name = 'StaleTokenError';
    this.code = 'stale_token';
    this.key = key;
    this.token = token;
    this.highest = highest;
  }
}

/** The election does not lead (never campaigned, resigned, or lost it);
 * nothing was published. */
export class NotLeadingError extends FencedError {
  constructor(message, opts = {}) { super(message, { code: 'not_leading', ...opts }); this.name = 'NotLeadingError'; }
}

/** Nobody holds the election's key. */
export class NoLeaderError extends FencedError {
  constructor(message, opts = {}) { super(message, { code: 'no_leader', ...opts }); this.name = 'NoLeaderError'; }
}
