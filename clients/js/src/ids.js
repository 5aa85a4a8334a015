// Request ids: the client sends them and the lease keeps its own, so they
// live apart from both.

import { randomBytes } from 'node:crypto';

/** A random request id for an acquire. */
export function newRequestId() { return randomBytes(12).toString('hex'); }
