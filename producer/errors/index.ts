export { KmfleetError, KmfleetInputError } from './kmfleet-error.js';
export { SpecValidationError, type SpecIssue } from './spec-validation-error.js';
export { LimitsConfigError } from './limits-config-error.js';
export { ConnectionConfigError } from './connection-config-error.js';
export { RedisUnavailableError } from './redis-unavailable-error.js';
export {
  JobNotFoundError,
  JobFailedError,
  JobCancelledError,
  WaitTimeoutError,
  InvalidArgumentError,
} from './job-errors.js';
export { abortError, isAbortError } from './abort-error.js';
