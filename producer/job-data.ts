/**
 * What a BullMQ job of kmfleet carries. Name: JOB_NAME. Data: JobData (the worker re-validates
 * `data.spec` with parseJobSpec before doing anything). Return value: JobResult (results.ts).
 * Progress: JobProgress (progress.ts), set with job.updateProgress().
 */
import type { JobSpec } from './spec.js';

export const JOB_NAME = 'kmeans';

export interface JobData {
  /** The validated spec, defaults filled in. */
  spec: JobSpec;
  /** specHash(spec) when enqueued (the worker recomputes it; a mismatch means a different producer version). */
  specHash: string;
  /** ms since epoch when the producer enqueued it (absent for jobs made by a scheduler). */
  enqueuedAt?: number;
  /** Random per enqueue() call: tells "my add created this job" from "the job id already existed". */
  enqueueId?: string;
  /** The job scheduler that made the job, if any (its id = the schedule name). */
  scheduler?: string;
}

/**
 * Job ids are idempotency keys; BullMQ refuses ':' and integer-looking ids, Redis keys need no braces. A job's outputs
 * go under <output>/<jobId>/, so `.` and `..` are refused: a server that resolves dot-segments would climb out.
 */
export const JOB_ID_RE = /^(?!\d+$)(?!\.\.?$)[A-Za-z0-9._-]{1,128}$/;
export const JOB_ID_RULE = "1-128 characters [A-Za-z0-9._-], not only digits, not '.' or '..'";
