/**
 * Every Redis key kmfleet uses, in one place. One prefix (default `kmfleet`), hash-tagged as `{kmfleet}`
 * so that ALL keys — BullMQ's and ours — live in one Redis Cluster slot: the Lua scripts and MULTIs below
 * (and BullMQ's) may then touch several of them at once.
 *
 *   BullMQ                 prefix `{kmfleet}`, queue `jobs`  →  {kmfleet}:jobs:wait, {kmfleet}:jobs:<jobId>, ...
 *                          Pass `bullPrefix` as `prefix` to every Queue / Worker / QueueEvents.
 *   iterations(jobId)      STREAM  one entry per iteration: iteration, inertia, reassigned, shift, ms
 *   checkpoint(jobId)      HASH    generation, iteration, uri, specHash, updatedAt (+ claimed: fencing counter)
 *   cancel(jobId)          STRING  the cancel reason; set by requestCancel, 24 h TTL
 *   cancelChannel          PUBSUB  message = jobId; published by requestCancel
 *   modelHistory(name)     ZSET    member jobId, score finishedAt (ms); newest first = ZREVRANGE
 *   modelResults(name)     HASH    field jobId → JSON JobResult (trimmed together with the ZSET)
 *   modelLatest(name)      STRING  jobId of the newest result (by finishedAt)
 *   models                 SET     model names that have results
 *
 * Per-job keys carry the queue name: two queues under one prefix may reuse a job id. Job ids may contain ':'
 * (jobs made by a scheduler are `repeat:<schedule>:<millis>`).
 */
import { ArgumentError } from './errors/job-errors.js';
export const DEFAULT_PREFIX = 'kmfleet';
export const DEFAULT_QUEUE = 'jobs';

const NAME_RE = /^[A-Za-z0-9._-]{1,64}$/;

export interface KeyspaceOptions {
  /** Key prefix, without braces: [A-Za-z0-9._-]; default `kmfleet` (env KMFLEET_PREFIX in the CLI). */
  prefix?: string;
  /** BullMQ queue name; default `jobs` (env KMFLEET_QUEUE in the CLI). */
  queue?: string;
}

export interface Keys {
  readonly prefix: string;
  readonly queueName: string;
  /** The `prefix` option for BullMQ (`{kmfleet}`). */
  readonly bullPrefix: string;
  iterations(jobId: string): string;
  checkpoint(jobId: string): string;
  cancel(jobId: string): string;
  readonly cancelChannel: string;
  modelHistory(name: string): string;
  modelResults(name: string): string;
  modelLatest(name: string): string;
  readonly models: string;
}

function checkPart(what: string, value: string): string {
  // Job ids may contain ':' (a scheduler's jobs are `repeat:<name>:<millis>`); keys stay unambiguous
  // because the part before and after the id is fixed. The hash tag is the first {...}, so the id can't move it.
  if (typeof value !== 'string' || value === '' || /\s/.test(value)) {
    throw new ArgumentError(`${what} ${JSON.stringify(value)} must be a non-empty string without spaces`);
  }
  return value;
}

export function keyspace(opts: KeyspaceOptions = {}): Keys {
  const prefix = opts.prefix ?? DEFAULT_PREFIX;
  const queueName = opts.queue ?? DEFAULT_QUEUE;
  if (!NAME_RE.test(prefix)) throw new ArgumentError(`prefix ${JSON.stringify(prefix)} must match ${NAME_RE}`);
  if (!NAME_RE.test(queueName)) throw new ArgumentError(`queue name ${JSON.stringify(queueName)} must match ${NAME_RE}`);
  const tag = `{${prefix}}`;
  const job = (jobId: string, what: string) => `${tag}:job:${queueName}:${checkPart('job id', jobId)}:${what}`;
  const model = (name: string, what: string) => `${tag}:model:${checkPart('model name', name)}:${what}`;
  return Object.freeze({
    prefix,
    queueName,
    bullPrefix: tag,
    iterations: (jobId: string) => job(jobId, 'iterations'),
    checkpoint: (jobId: string) => job(jobId, 'checkpoint'),
    cancel: (jobId: string) => job(jobId, 'cancel'),
    cancelChannel: `${tag}:cancel:${queueName}`,
    modelHistory: (name: string) => model(name, 'history'),
    modelResults: (name: string) => model(name, 'results'),
    modelLatest: (name: string) => model(name, 'latest'),
    models: `${tag}:models`,
  });
}
