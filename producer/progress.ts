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
  /** The share of rows the last iteration settled by their bounds, computing none of their distances; null if unknown. */
  settledFraction: number | null;
  /**
   * Time left: the iterations the observed convergence still needs (the trend of the shift and of the reassigned
   * fraction toward their stops), else every remaining iteration, plus the assign pass; null if unknown.
   */
  etaMs: number | null;
  /** ms since epoch of this report. */
  updatedAt: number;
  /** Where each pass after the first takes its rows; absent until the worker's engine is open. */
  rowsPerPass?: RowsPerPass;
}

/**
 * Rows of a pass by where they come from: kept on the device (resident), kept in the engine's host memory (host), and
 * read again every pass (fed) from the worker's memory cache, its disk cache, or S3.
 */
export interface RowsPerPass {
  resident: number;
  host: number;
  fed: number;
  fedFrom: 'memory' | 'disk' | 's3';
}

/** What the run has shown so far, for the ETA: one entry per iteration, and where it stops. */
export interface ConvergenceTrend {
  history: readonly { shift: number; reassignedFraction: number }[];
  /** the run stops once the shift is at most this (tol × the data's mean variance); absent: not known yet */
  shiftStop?: number;
  /** the run stops once the reassigned fraction is at most this (tolReassign) */
  reassignedStop?: number;
  /** rows: a reassigned fraction below 1/rows means no row moved */
  rows?: number;
}

/** Iterations the trend is fitted on: the last few, never the first (its shift is the init's, not Lloyd's pace). */
const TREND_WINDOW = 8;

/**
 * Iterations until `series` reaches `stop`, if its recent values fall toward it: Lloyd's shifts and moved rows fall
 * roughly geometrically, so a line is fitted (least squares) to their logarithms. Undefined when they do not fall.
 */
function iterationsToReach(series: number[], stop: number): number | undefined {
  const last = series[series.length - 1];
  if (last <= stop) return 0;
  const from = Math.max(1, series.length - TREND_WINDOW);
  const ys = series.slice(from).map(Math.log);
  if (ys.length < 3 || !(stop > 0) || ys.some((y) => !Number.isFinite(y))) return undefined;
  const n = ys.length;
  const meanX = (n - 1) / 2;
  const meanY = ys.reduce((a, y) => a + y, 0) / n;
  let sxy = 0;
  let sxx = 0;
  ys.forEach((y, x) => ((sxy += (x - meanX) * (y - meanY)), (sxx += (x - meanX) ** 2)));
  const slope = sxy / sxx;
  if (!(slope < 0)) return undefined;
  const fittedLast = meanY + slope * (n - 1 - meanX);
  return Math.max(1, Math.ceil((Math.log(stop) - fittedLast) / slope));
}

/**
 * Fit iterations still to come after `iteration`: the sooner of the stops the trend reaches, never more than maxIter
 * allows; maxIter's bound when neither trend falls.
 */
export function iterationsLeft(trend: ConvergenceTrend, iteration: number, maxIter: number): number {
  const bound = Math.max(0, maxIter - iteration);
  const estimates: number[] = [];
  if (trend.shiftStop !== undefined && Number.isFinite(trend.shiftStop)) {
    const n = iterationsToReach(trend.history.map((h) => h.shift), trend.shiftStop);
    if (n !== undefined) estimates.push(n);
  }
  if (trend.reassignedStop !== undefined) {
    // tolReassign 0 stops when no row moved: a fraction under one row
    const stop = Math.max(trend.reassignedStop, trend.rows ? 0.5 / trend.rows : 0);
    const n = iterationsToReach(trend.history.map((h) => h.reassignedFraction), stop);
    if (n !== undefined) estimates.push(n);
  }
  return estimates.length ? Math.min(bound, ...estimates) : bound;
}

/**
 * Builds a progress report. `msPerIteration` (e.g. the mean of the last few iterations) gives the ETA, for the
 * iterations `convergence` says are left (without it: every iteration up to maxIter); the assign pass and writes are
 * estimated as one more iteration.
 */
export function makeProgress(args: {
  phase: JobPhase;
  iteration: number;
  maxIter: number;
  rows?: number;
  last?: IterationRecord;
  msPerIteration?: number;
  convergence?: ConvergenceTrend;
  rowsPerPass?: RowsPerPass;
  /** the last iteration's share of rows settled by their bounds */
  settledFraction?: number;
  now?: number;
}): JobProgress {
  const { phase, iteration, maxIter, rows, last, msPerIteration, convergence } = args;
  let etaMs: number | null = null;
  if (phase === 'done') etaMs = 0;
  else if (msPerIteration !== undefined && msPerIteration >= 0) {
    const fitting = phase === 'iterating' || phase === 'initializing';
    const fits = !fitting ? 0 : convergence ? iterationsLeft({ rows, ...convergence }, iteration, maxIter) : Math.max(0, maxIter - iteration);
    etaMs = Math.round((fits + 1) * msPerIteration);
  }
  return {
    phase,
    iteration,
    maxIter,
    inertia: last?.inertia ?? null,
    reassigned: last?.reassigned ?? null,
    reassignedFraction: last && rows ? last.reassigned / rows : null,
    shift: last?.shift ?? null,
    settledFraction: args.settledFraction ?? null,
    etaMs,
    updatedAt: args.now ?? Date.now(),
    ...(args.rowsPerPass ? { rowsPerPass: args.rowsPerPass } : {}),
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
