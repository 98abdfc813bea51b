import type { InputErrorCode } from './exit-status.js';
import { KmfleetError } from './kmfleet-error.js';

/**
 * An error whose cause is the caller's input (a bad spec, flag, argument, REDIS_URL, limits or worker setting): the
 * CLI exits with 2, the API answers 400. Subclasses say which input; this class itself serves a bad command-line value.
 */
export class KmfleetInputError extends KmfleetError {
  readonly code: InputErrorCode = 'BAD_INPUT';
}
