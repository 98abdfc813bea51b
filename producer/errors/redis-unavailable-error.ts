import { KmfleetError } from '../../errors/index.js';

/**
 * Redis could not be reached (producers fail fast instead of queueing commands while it is down). Not the job's
 * outcome, so the CLI gives it its own exit status and a script may retry.
 */
export class RedisUnavailableError extends KmfleetError {
  readonly code = 'REDIS_UNAVAILABLE';
}
