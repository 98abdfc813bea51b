/**
 * The spans of one job attempt (docs/operations.md, Tracing), under BullMQ's `process` span, whose parent is the
 * producer's enqueue: one trace from `enqueue` to the outputs.
 *
 *   kmfleet.job                        jobId, attempt, outcome
 *     kmfleet.open                     claim, bucket check, dataset header, download start
 *     kmfleet.init                     checkpoint lookup or init, engine open
 *     kmfleet.iterate                  the run
 *       kmfleet.iteration              one per iteration (the engine's timing), with inertia and reassigned rows
 *       kmfleet.checkpoint             one per checkpoint saved
 *     kmfleet.outputs                  centroids / assignments / distances uploads
 *       kmfleet.commit                 the commit point, the copies into place, summary.json
 *     kmfleet.record                   the result history, the last progress
 *
 * S3 and Redis client spans nest under whichever is active. Without tracing (no SDK registered) each helper just runs
 * its function: producer/telemetry.ts.
 */
import type { IterationReport } from '../core/index.js';
import { recordSpan, withSpan } from '../producer/telemetry.js';

export type JobPhase = 'open' | 'init' | 'iterate' | 'outputs' | 'commit' | 'record';

export function jobSpan<T>(jobId: string, attempt: number, fn: (setOutcome: (outcome: string) => void) => Promise<T>): Promise<T> {
  return withSpan('kmfleet.job', { 'kmfleet.job.id': jobId, 'kmfleet.job.attempt': attempt }, (span) =>
    fn((outcome) => span?.setAttribute('kmfleet.job.outcome', outcome)),
  );
}

export function phaseSpan<T>(phase: JobPhase, fn: () => Promise<T>): Promise<T> {
  return withSpan(`kmfleet.${phase}`, {}, fn);
}

/** An iteration the engine has just finished, as a span of its own duration. */
export function iterationSpan(report: IterationReport): void {
  recordSpan('kmfleet.iteration', report.ms, {
    'kmfleet.iteration': report.iteration,
    'kmfleet.inertia': report.inertia,
    'kmfleet.reassigned': report.reassigned,
  });
}

export function checkpointSpan<T>(iteration: number, fn: () => Promise<T>): Promise<T> {
  return withSpan('kmfleet.checkpoint', { 'kmfleet.iteration': iteration }, fn);
}
