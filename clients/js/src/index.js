// fenced-client: a client of the fenced fencing-token coordinator, Node
// built-ins only.
export { FencingToken, MAX_TOKEN } from './token.js';
export { FencedClient, newRequestId, parseDuration, durationText } from './client.js';
export { FencedLease } from './lease.js';
export { FencedWatch } from './watch.js';
export { FencedElection, LeaderObservation } from './election.js';
export { FenceGuard } from './guard.js';
export { KeySet, ProofError, verifyProof, PROOF_TYPE, MAX_PROOF_LEN } from './proof.js';
export { FencedError, UnavailableError, UnknownOutcomeError, StaleTokenError, NotLeadingError, NoLeaderError } from './errors.js';
