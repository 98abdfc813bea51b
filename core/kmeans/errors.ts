import { KmfleetError } from '../../errors/index.js';
import type { KmeansCheckpoint } from './types.js';

/** A spec, initial centroids or checkpoint that cannot run on this dataset: a user error, never retried. */
export class KmeansSpecError extends KmfleetError {
  readonly code = 'INVALID_SPEC';
}

/**
 * The run stopped because its AbortSignal fired. `checkpoint` is the last completed iteration's (undefined before the
 * first one): what a preempted worker saves before it puts the job back.
 */
export class KmeansAbortedError extends KmfleetError {
  readonly code = 'ABORTED';
  constructor(readonly checkpoint: KmeansCheckpoint | undefined, readonly reason?: unknown) {
    super(`k-means run aborted${checkpoint ? ` after iteration ${checkpoint.iteration}` : ' before the first iteration'}`);
  }
}
