/**
 * `kmfleet/producer`, the SDK: what a program needs to enqueue, follow, cancel and schedule jobs and read their
 * results. The rest of the contract (Redis keys, job data, iteration streams, cancel flags, limits) is imported by
 * path by the worker, the CLI and the API, and is not part of this surface.
 */
export { KmfleetClient } from './client.js';
export {
  DEFAULT_JOB_OPTIONS,
  DEFAULT_PRIORITY,
  MAX_PRIORITY,
  type CancelOutcome,
  type CancelResult,
  type EnqueueOptions,
  type JobHandle,
  type JobInfo,
  type JobState,
  type KmfleetClientOptions,
  type ListOptions,
  type ProgressUpdate,
  type RemoveResult,
  type RetryResult,
  type WaitOptions,
} from './client-options.js';

// the job spec
export { jobSpecSchema, parseJobSpec, specHash, type DatasetRef, type JobSpec, type JobSpecInput } from './spec.js';
export {
  SPEC_DEFAULTS,
  SPEC_VERSION,
  type Backend,
  type DatasetConversion,
  type DatasetFormat,
  type Init,
  type InitMethod,
  type Metric,
  type Precision,
} from './spec-vocabulary.js';
export type { Limits } from './limits.js';

// what a job reports
export type { JobPhase, JobProgress, RowsPerPass } from './progress.js';
export type { JobOutputs, JobResult, StopReason } from './results.js';

// schedules and connections
export type { RepeatInput, ScheduleInfo } from './schedule.js';
export { connectionFromEnv, type RedisConnectionOptions } from './connection.js';

// errors: every one a KmfleetError with a code
export {
  ArgumentError,
  ConnectionConfigError,
  isAbortError,
  JobCancelledError,
  JobFailedError,
  JobNotFoundError,
  KmfleetError,
  KmfleetInputError,
  LimitsConfigError,
  RedisUnavailableError,
  SpecValidationError,
  WaitTimeoutError,
  type SpecIssue,
} from './errors/index.js';
export type { ErrorCode, ExitStatus } from '../errors/index.js';
