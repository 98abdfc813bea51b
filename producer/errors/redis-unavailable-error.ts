import { KmfleetError } from './kmfleet-error.js';

/** Redis could not be reached (producers fail fast instead of queueing commands while it is down). */
export class RedisUnavailableError extends KmfleetError {}
