/**
 * What the dashboard shows, read through the SDK: the queue (counts by state, the recent jobs of each state,
 * the schedules), one job, its iteration history, a model's result history. Plain JSON, no HTML: the page
 * renders it (as text, never as markup: names and failure reasons are user data).
 */
import type { Job } from 'bullmq';
import type { JobInfo, KmfleetClient } from '../client.js';
import type { JobData } from '../job-data.js';
import { readIterations, type IterationRecord } from '../job-state.js';
import { asJobProgress, type JobProgress } from '../progress.js';
import type { JobResult } from '../results.js';
import type { ScheduleInfo } from '../schedule.js';

export const QUEUE_STATES = ['waiting', 'prioritized', 'delayed', 'active', 'completed', 'failed'] as const;
export type QueueState = (typeof QUEUE_STATES)[number];

/** One row of the jobs table. */
export interface JobRow {
  id: string;
  state: QueueState;
  /** spec.name (the model), if any. */
  name: string | null;
  k: number | null;
  dataset: string | null;
  scheduler: string | null;
  progress: JobProgress | null;
  failedReason: string | null;
  attemptsMade: number;
  /** Final inertia and iterations of a completed job. */
  result: { inertia: number; iterations: number; converged: boolean } | null;
  createdAt: number;
  startedAt: number | null;
  finishedAt: number | null;
}

export interface QueueSnapshot {
  /** Where Redis is (no password). */
  where: string;
  prefix: string;
  queue: string;
  counts: Record<QueueState, number>;
  /** Newest first (by the latest of created/started/finished), at most `limit`. */
  jobs: JobRow[];
  schedules: ScheduleInfo[];
  at: number;
}

function toRow(job: Job, state: QueueState): JobRow {
  const data = job.data as Partial<JobData> | undefined;
  const r = state === 'completed' ? (job.returnvalue as JobResult | null) : null;
  return {
    id: job.id ?? '',
    state,
    name: data?.spec?.name ?? null,
    k: data?.spec?.k ?? null,
    dataset: data?.spec?.dataset?.uri ?? null,
    scheduler: data?.scheduler ?? null,
    progress: asJobProgress(job.progress),
    failedReason: job.failedReason || null,
    attemptsMade: job.attemptsMade ?? 0,
    result: r && typeof r.inertia === 'number' ? { inertia: r.inertia, iterations: r.iterations, converged: r.converged } : null,
    createdAt: job.timestamp,
    startedAt: job.processedOn ?? null,
    finishedAt: job.finishedOn ?? null,
  };
}

const recency = (j: JobRow) => Math.max(j.createdAt, j.startedAt ?? 0, j.finishedAt ?? 0);

/** Counts, the newest `limit` jobs over all states (every active one first), and the schedules. */
export async function queueSnapshot(client: KmfleetClient, opts: { limit?: number } = {}): Promise<QueueSnapshot> {
  const limit = opts.limit ?? 50;
  const queue = await client.queue();
  const counts = (await queue.getJobCounts(...QUEUE_STATES)) as Record<QueueState, number>;
  const perState = await Promise.all(
    QUEUE_STATES.map(async (state) => {
      // getJobs lists newest first for these states; a state's list is cut at `limit` before the merge.
      const jobs = await queue.getJobs([state], 0, limit - 1, state === 'waiting' || state === 'prioritized');
      return jobs.filter((j): j is Job => Boolean(j)).map((j) => toRow(j, state));
    }),
  );
  const all = perState.flat();
  const active = all.filter((j) => j.state === 'active').sort((a, b) => recency(b) - recency(a));
  const rest = all.filter((j) => j.state !== 'active').sort((a, b) => recency(b) - recency(a));
  return {
    where: client.where,
    prefix: client.keys.prefix,
    queue: client.keys.queueName,
    counts: Object.fromEntries(QUEUE_STATES.map((s) => [s, Number(counts[s] ?? 0)])) as Record<QueueState, number>,
    jobs: [...active, ...rest].slice(0, limit),
    schedules: await client.schedules(),
    at: Date.now(),
  };
}

export async function jobDetail(client: KmfleetClient, jobId: string): Promise<JobInfo | null> {
  return client.get(jobId);
}

export async function jobIterations(client: KmfleetClient, jobId: string): Promise<IterationRecord[]> {
  return readIterations(await client.connection(), client.keys, jobId);
}

export async function modelHistory(client: KmfleetClient, name: string, limit = 50): Promise<JobResult[]> {
  return client.history(name, { limit });
}
