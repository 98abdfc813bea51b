/**
 * Progress of a running job, as the worker reports it with job.updateProgress(progress) after each
 * iteration (and at phase changes). Producers read it from job.progress (get/wait).
 */
import type { IterationRecord } from './job-state.js';

/** `queued`: no report from a worker yet (wait() and progress() say so instead of giving null). */
export const JOB_PHASES = ['queued', 'opening', 'planning', 'initializing', 'iterating', 'assigning', 'writing', 'done'] as const;
export type JobPhase = (typeof JOB_PHASES)[number];

export interface JobProgress {
  phase: JobPhase;
  /** Iterations completed (0 before the first). */
  iteration: number;
  maxIter: number;
  /** Sum of squared distances to the nearest centroid after the last iteration; null before the first. */
  inertia: number | null;
  /** Rows that changed cluster in the last iteration. */
  reassigned: number | null;
  /** reassigned / rows (compared with spec.tolReassign). */
  reassignedFraction: number | null;
  /** Sum of squared centroid shifts in the last iteration (compared with tol × mean variance). */
  shift: number | null;
  /** Time left if every remaining iteration runs (an upper bound: convergence may come sooner); null if unknown. */
  etaMs: number | null;
  /** ms since epoch of this report. */
  updatedAt: number;
}

/**
 * Builds a progress report. `msPerIteration` (e.g. the mean of the last few iterations) gives the ETA;
 * the assign pass and writes are estimated as one more iteration.
 */
export function makeProgress(args: {
  phase: JobPhase;
  iteration: number;
  maxIter: number;
  rows?: number;
  last?: IterationRecord;
  msPerIteration?: number;
  now?: number;
}): JobProgress {
  const { phase, iteration, maxIter, rows, last, msPerIteration } = args;
  let etaMs: number | null = null;
  if (phase === 'done') etaMs = 0;
  else if (msPerIteration !== undefined && msPerIteration >= 0) {
    const left = phase === 'iterating' || phase === 'initializing' ? Math.max(0, maxIter - iteration) + 1 : 1;
    etaMs = Math.round(left * msPerIteration);
  }
  return {
    phase,
    iteration,
    maxIter,
    inertia: last?.inertia ?? null,
    reassigned: last?.reassigned ?? null,
    reassignedFraction: last && rows ? last.reassigned / rows : null,
    shift: last?.shift ?? null,
    etaMs,
    updatedAt: args.now ?? Date.now(),
  };
}

/** What a job that no worker has reported on yet shows: iteration 0 of its maxIter, nothing measured. */
export function queuedProgress(maxIter: number, now = Date.now()): JobProgress {
  return makeProgress({ phase: 'queued', iteration: 0, maxIter, now });
}

/** job.progress is 0 (BullMQ's default) until the worker reports; this tells a real report apart. */
export function asJobProgress(value: unknown): JobProgress | null {
  if (value === null || typeof value !== 'object') return null;
  const p = value as Partial<JobProgress>;
  return typeof p.iteration === 'number' && typeof p.maxIter === 'number' && typeof p.phase === 'string'
    ? (p as JobProgress)
    : null;
}
