import { KmfleetError } from './kmfleet-error.js';

/** Redis could not be reached (producers fail fast instead of queueing commands while it is down). */
export class RedisUnavailableError extends KmfleetError {
  /** the CLI's "could not use Redis": not the job's outcome, so a script may retry */
  override readonly exitCode = 3 as const;
}
