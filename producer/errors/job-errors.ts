import { KmfleetError, KmfleetInputError } from '../../errors/index.js';

/** No job with this id (never enqueued, or removed — e.g. a waiting job that was cancelled). */
export class JobNotFoundError extends KmfleetError {
  readonly code = 'JOB_NOT_FOUND';
  constructor(readonly jobId: string, detail = '') {
    super(`job ${jobId} not found${detail ? ` (${detail})` : ''}`);
  }
}

/** The job ended in the failed state; `failedReason` is BullMQ's, `attemptsMade` counts tries. */
export class JobFailedError extends KmfleetError {
  readonly code = 'JOB_FAILED';
  constructor(
    readonly jobId: string,
    readonly failedReason: string,
    readonly attemptsMade: number,
  ) {
    super(`job ${jobId} failed after ${attemptsMade} attempt${attemptsMade === 1 ? '' : 's'}: ${failedReason}`);
  }
}

/** The job was cancelled (removed while waiting, or failed with reason "cancelled" while active). */
export class JobCancelledError extends KmfleetError {
  readonly code = 'JOB_CANCELLED';
  constructor(readonly jobId: string) {
    super(`job ${jobId} was cancelled`);
  }
}

/** wait() gave up; the job itself goes on. */
export class WaitTimeoutError extends KmfleetError {
  readonly code = 'WAIT_TIMEOUT';
  constructor(
    readonly jobId: string,
    readonly timeoutMs: number,
    readonly lastState: string,
  ) {
    super(`timed out after ${timeoutMs} ms waiting for job ${jobId} (still ${lastState})`);
  }
}

/**
 * A job id, schedule name, priority, duration or similar argument of an SDK call that is not acceptable. (The engine's
 * own refusals are native/index.ts's InvalidArgumentError.)
 */
export class ArgumentError extends KmfleetInputError {
  override readonly code = 'BAD_ARGUMENT';
}
