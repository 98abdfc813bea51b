import { KmfleetError } from '../../errors/index.js';

/**
 * This worker no longer owns the job: its BullMQ lock expired (or was taken) and another worker claimed the job since.
 * Whatever it was about to write (a checkpoint, outputs) must not be written; the job is someone else's now.
 */
export class FencedError extends KmfleetError {
  readonly code = 'FENCED';
  constructor(
    readonly jobId: string,
    readonly reason: 'lock-lost' | 'superseded',
  ) {
    super(
      reason === 'lock-lost'
        ? `job ${jobId}: this worker lost the job's lock; not writing`
        : `job ${jobId}: another worker claimed the job since this one did; not writing`,
    );
  }
}

/** The job was cancelled before its outputs were committed: the attempt stops, its staged outputs are discarded. */
export class CancelledBeforeCommitError extends KmfleetError {
  readonly code = 'CANCELLED_BEFORE_COMMIT';
  constructor(readonly jobId: string) {
    super(`job ${jobId}: cancelled before its outputs were committed`);
  }
}
