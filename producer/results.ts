/**
 * What a finished job returns (its BullMQ return value, also the entry in the model's result history),
 * and the history itself: per model name, results newest first and a pointer to the latest.
 *
 * The worker, after summary.json is written (the commit point):
 *   const result: JobResult = {...};
 *   if (spec.name) await recordResult(redis, keys, spec.name, result);
 *   return result;                                   // → job.returnvalue
 * Producers: readHistory / readLatest (KmfleetClient.history / latest). `init: 'previous'` uses
 * readLatest(name)?.outputs.centroids.
 */
import type { Keys } from './keys.js';
import type { RedisClient } from './job-state.js';
import type { DatasetFormat, JobSpec, Precision } from './spec.js';

export type StopReason = 'tol' | 'tolReassign' | 'maxIter';

export interface JobOutputs {
  /** `<output>/<jobId>` */
  prefix: string;
  /** float32 K×D .npy */
  centroids: string;
  /** int32 N .npy */
  assignments: string;
  /** float32 N .npy, when requested */
  distances?: string;
  /** summary.json, written last */
  summary: string;
}

export interface JobResult {
  jobId: string;
  /** Model name (spec.name), if any. */
  name?: string;
  spec: JobSpec;
  specHash: string;
  dataset: { uri: string; etag: string; format: DatasetFormat; rows: number; dims: number };
  k: number;
  /** Iterations run (including any before a resume). */
  iterations: number;
  converged: boolean;
  stopReason: StopReason;
  /** Inertia of the final centroids (after the assign pass). */
  inertia: number;
  emptyClustersReseeded: number;
  /** 'cpu' | 'cuda' as run. */
  backend: string;
  /** Device description, e.g. 'NVIDIA H200' or the CPU model. */
  device: string;
  /** Precision as run (never 'auto'). */
  precision: Exclude<Precision, 'auto'>;
  outputs: JobOutputs;
  /** Output file → checksum (e.g. sha256 hex), as in summary.json. */
  checksums?: Record<string, string>;
  /** Phase → ms; `totalMs` always present. */
  timings: { totalMs: number } & Record<string, number>;
  /** Set when the job resumed from a checkpoint. */
  resumedFrom?: { iteration: number; generation: number };
  /** The centroids it started from when init was 'previous' or an s3 URI. */
  initFrom?: string;
  startedAt: number;
  finishedAt: number;
}

/** Results kept per model name (older ones are trimmed from the history). */
export const DEFAULT_HISTORY_LIMIT = 1000;

const RECORD_RESULT = `
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[5])
local n = redis.call('ZCARD', KEYS[1])
local limit = tonumber(ARGV[4])
if n > limit then
  local old = redis.call('ZRANGE', KEYS[1], 0, n - limit - 1)
  for _, id in ipairs(old) do redis.call('HDEL', KEYS[2], id) end
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - limit - 1)
end
local top = redis.call('ZREVRANGE', KEYS[1], 0, 0)[1]
redis.call('SET', KEYS[3], top)
if top == ARGV[1] then return 1 end
return 0
`;

/**
 * Adds a result to the model's history (idempotent per jobId: a retried job replaces its entry) and moves
 * `latest` if it is the newest by finishedAt. Returns true when it became the latest.
 */
export async function recordResult(
  redis: RedisClient,
  keys: Keys,
  name: string,
  result: JobResult,
  opts: { historyLimit?: number } = {},
): Promise<boolean> {
  const ok = await redis.eval(
    RECORD_RESULT, 4,
    keys.modelHistory(name), keys.modelResults(name), keys.modelLatest(name), keys.models,
    result.jobId, String(result.finishedAt), JSON.stringify(result),
    String(opts.historyLimit ?? DEFAULT_HISTORY_LIMIT), name,
  );
  return Number(ok) === 1;
}

/** Results of a model, newest first (by finishedAt). */
export async function readHistory(
  redis: RedisClient,
  keys: Keys,
  name: string,
  opts: { limit?: number } = {},
): Promise<JobResult[]> {
  const limit = opts.limit ?? 20;
  if (limit <= 0) return [];
  const ids = await redis.zrevrange(keys.modelHistory(name), 0, limit - 1);
  if (ids.length === 0) return [];
  const rows = await redis.hmget(keys.modelResults(name), ...ids);
  return rows.filter((r): r is string => r !== null).map((r) => JSON.parse(r) as JobResult);
}

/** The newest result of a model, or null if it has none. */
export async function readLatest(redis: RedisClient, keys: Keys, name: string): Promise<JobResult | null> {
  const id = await redis.get(keys.modelLatest(name));
  if (!id) return null;
  const row = await redis.hget(keys.modelResults(name), id);
  return row ? (JSON.parse(row) as JobResult) : null;
}

/** Model names that have at least one result. */
export async function readModels(redis: RedisClient, keys: Keys): Promise<string[]> {
  return (await redis.smembers(keys.models)).sort();
}
