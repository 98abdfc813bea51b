import type { KmeansCheckpoint } from './types.js';

/** A spec, initial centroids or checkpoint that cannot run on this dataset: a user error, never retried. */
export class KmeansSpecError extends Error {
  readonly code = 'INVALID_SPEC';
  constructor(message: string) {
    super(message);
    this.name = 'KmeansSpecError';
  }
}

/**
 * The run stopped because its AbortSignal fired. `checkpoint` is the last completed iteration's (undefined before the
 * first one): what a preempted worker saves before it puts the job back.
 */
export class KmeansAbortedError extends Error {
  readonly code = 'ABORTED';
  constructor(readonly checkpoint: KmeansCheckpoint | undefined, readonly reason?: unknown) {
    super(`k-means run aborted${checkpoint ? ` after iteration ${checkpoint.iteration}` : ' before the first iteration'}`);
    this.name = 'KmeansAbortedError';
  }
}
