export { KmfleetError, KmfleetInputError } from '../../errors/index.js';
export { SpecValidationError, type SpecIssue } from './spec-validation-error.js';
export { LimitsConfigError } from './limits-config-error.js';
export { ConnectionConfigError } from './connection-config-error.js';
export { RedisUnavailableError } from './redis-unavailable-error.js';
export {
  JobNotFoundError,
  JobFailedError,
  JobCancelledError,
  WaitTimeoutError,
  ArgumentError,
} from './job-errors.js';
export { abortError, isAbortError } from './abort-error.js';
