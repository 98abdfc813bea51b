/**
 * What the dashboard shows, read through the SDK: the queue (counts by state, the schedules), one page of its jobs,
 * one job, its iteration history, a model's result history. Plain JSON, no HTML: the page renders it (as text, never
 * as markup: names and failure reasons are user data).
 */
import type { Job } from 'bullmq';
import type { JobInfo, KmfleetClient } from '../producer/client.js';
import { ArgumentError } from '../producer/errors/index.js';
import type { JobData } from '../producer/job-data.js';
import { readIterations, type IterationRecord } from '../producer/job-state.js';
import { asJobProgress, type JobProgress } from '../producer/progress.js';
import type { JobResult } from '../producer/results.js';
import type { ScheduleInfo } from '../producer/schedule.js';

export const QUEUE_STATES = ['waiting', 'prioritized', 'delayed', 'active', 'completed', 'failed'] as const;
export type QueueState = (typeof QUEUE_STATES)[number];

/** The order of the states in the list of all jobs: running, then in the order they will run, then finished. */
export const LIST_ORDER: readonly QueueState[] = ['active', 'waiting', 'prioritized', 'delayed', 'failed', 'completed'];
export const MAX_PAGE = 200;

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
  schedules: ScheduleInfo[];
  at: number;
}

export interface JobPage {
  state: QueueState | 'all';
  offset: number;
  limit: number;
  /** Jobs in that state (all states: their sum) when the page was read. */
  total: number;
  /**
   * Each state in BullMQ's order (waiting and prioritized in the order they run, delayed soonest first, active and
   * finished ones newest first); all states: one after the other in LIST_ORDER, so that a page is a plain slice. Counts
   * and lists are separate reads: a job that changes state between them may show on two pages or none, once.
   */
  jobs: JobRow[];
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

/** waiting, prioritized and delayed lists read in the order the jobs will run; the others newest first. */
const ascending = (state: QueueState) => state === 'waiting' || state === 'prioritized' || state === 'delayed';

async function counts(client: KmfleetClient): Promise<Record<QueueState, number>> {
  const raw = (await (await client.queue()).getJobCounts(...QUEUE_STATES)) as Record<string, number>;
  return Object.fromEntries(QUEUE_STATES.map((s) => [s, Number(raw[s] ?? 0)])) as Record<QueueState, number>;
}

/** Counts by state and the schedules. */
export async function queueSnapshot(client: KmfleetClient): Promise<QueueSnapshot> {
  const [byState, schedules] = await Promise.all([counts(client), client.schedules()]);
  return { where: client.where, prefix: client.keys.prefix, queue: client.keys.queueName, counts: byState, schedules, at: Date.now() };
}

/** Jobs [offset, offset+limit) of one state, or of all states merged. */
export async function jobPage(client: KmfleetClient, opts: { state?: string; offset?: number; limit?: number } = {}): Promise<JobPage> {
  const state = opts.state ?? 'all';
  if (state !== 'all' && !(QUEUE_STATES as readonly string[]).includes(state)) {
    throw new ArgumentError(`state must be all or one of ${QUEUE_STATES.join(', ')} (got ${JSON.stringify(state)})`);
  }
  const offset = opts.offset ?? 0;
  const limit = opts.limit ?? 25;
  if (!Number.isSafeInteger(offset) || offset < 0) throw new ArgumentError(`offset must be a non-negative integer (got ${opts.offset})`);
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_PAGE) throw new ArgumentError(`limit must be 1..${MAX_PAGE} (got ${opts.limit})`);
  const queue = await client.queue();
  const byState = await counts(client);
  const read = async (s: QueueState, start: number, end: number) =>
    (await queue.getJobs([s], start, end, ascending(s))).filter((j): j is Job => Boolean(j?.id)).map((j) => toRow(j, s));

  if (state !== 'all') {
    const s = state as QueueState;
    return { state: s, offset, limit, total: byState[s], jobs: await read(s, offset, offset + limit - 1) };
  }
  // the page's window [offset, offset+limit) over the states laid end to end: read only the part each state holds
  const reads: Promise<JobRow[]>[] = [];
  let start = 0;
  for (const s of LIST_ORDER) {
    const from = Math.max(offset, start), to = Math.min(offset + limit, start + byState[s]);
    if (from < to) reads.push(read(s, from - start, to - start - 1));
    start += byState[s];
  }
  return { state: 'all', offset, limit, total: start, jobs: (await Promise.all(reads)).flat().slice(0, limit) };
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
