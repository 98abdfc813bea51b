import { KmfleetInputError } from '../../errors/index.js';

/** A KMFLEET_MAX_* environment variable (or a limits option) that is not a positive integer. */
export class LimitsConfigError extends KmfleetInputError {
  override readonly code = 'LIMITS_CONFIG';
}
