import { KmfleetError, KmfleetInputError } from './kmfleet-error.js';

/** No job with this id (never enqueued, or removed — e.g. a waiting job that was cancelled). */
export class JobNotFoundError extends KmfleetError {
  constructor(readonly jobId: string, detail = '') {
    super(`job ${jobId} not found${detail ? ` (${detail})` : ''}`);
  }
}

/** The job ended in the failed state; `failedReason` is BullMQ's, `attemptsMade` counts tries. */
export class JobFailedError extends KmfleetError {
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
  constructor(readonly jobId: string) {
    super(`job ${jobId} was cancelled`);
  }
}

/** wait() gave up; the job itself goes on. */
export class WaitTimeoutError extends KmfleetError {
  override readonly exitCode = 4 as const;
  constructor(
    readonly jobId: string,
    readonly timeoutMs: number,
    readonly lastState: string,
  ) {
    super(`timed out after ${timeoutMs} ms waiting for job ${jobId} (still ${lastState})`);
  }
}

/** A job id, schedule name, priority or similar argument that is not acceptable. */
export class InvalidArgumentError extends KmfleetInputError {}
