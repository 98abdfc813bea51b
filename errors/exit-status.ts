/**
 * Every error code of kmfleet, with the exit status the CLI gives it (cli/main.ts), so that scripts can tell the
 * outcomes apart: 1 a failure (the job failed, was cancelled or is unknown; the engine, a device, S3, a bug) · 2 bad
 * input (the caller can fix the command line, spec, dataset or configuration) · 3 Redis could not be used (down,
 * refused, password, TLS) · 4 gave up waiting (the job goes on) · 130 interrupted.
 * A new error class needs its code here: `KmfleetError.code` accepts no other.
 */
export type ExitStatus = 1 | 2 | 3 | 4 | 130;

export const EXIT_STATUS = {
  // bad input
  BAD_INPUT: 2,
  BAD_ARGUMENT: 2,
  INVALID_JOB_SPEC: 2,
  LIMITS_CONFIG: 2,
  CONNECTION_CONFIG: 2,
  WORKER_CONFIG: 2,
  S3_CONFIG: 2,
  API_CONFIG: 2,
  API_TOKEN_CONFIG: 2,
  TRACING_CONFIG: 2,
  INVALID_SPEC: 2,
  DATASET_FORMAT: 2,
  JOB_INPUT: 2,
  S3_NOT_FOUND: 2,
  S3_UNSAFE_URI: 2,
  INVALID_ARGUMENT: 2,
  NON_FINITE_INPUT: 2,
  // the job's outcome, and failures of the fleet
  JOB_NOT_FOUND: 1,
  JOB_FAILED: 1,
  JOB_CANCELLED: 1,
  COMMAND_FAILED: 1,
  HTTP_ANSWER: 1,
  FENCED: 1,
  CANCELLED_BEFORE_COMMIT: 1,
  REDIS_POLICY: 1,
  S3_OBJECT_CHANGED: 1,
  S3_SHORT_READ: 1,
  OUT_OF_MEMORY: 1,
  DEVICE_ERROR: 1,
  CANCELLED: 1,
  // outcomes a script must tell from a failed job
  REDIS_UNAVAILABLE: 3,
  WAIT_TIMEOUT: 4,
  ABORTED: 130,
} as const satisfies Record<string, ExitStatus>;

export type ErrorCode = keyof typeof EXIT_STATUS;

/** The codes of bad input (exit status 2): the only codes a KmfleetInputError may carry. */
export type InputErrorCode = { [C in ErrorCode]: (typeof EXIT_STATUS)[C] extends 2 ? C : never }[ErrorCode];
