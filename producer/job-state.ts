/**
 * Per-job state in Redis that the worker writes while a job runs: the iteration history (a STREAM) and
 * the checkpoint record (a HASH), fenced by generation so that a worker that lost its lock cannot
 * overwrite what its successor wrote.
 *
 * Fencing protocol (the worker side):
 *   const gen = await claimGeneration(redis, keys, jobId);          // when it takes (or resumes) the job
 *   ... after writing a checkpoint object to S3 under a name that includes gen:
 *   if (!await writeCheckpointRecord(redis, keys, jobId, { generation: gen, iteration, uri, specHash }))
 *     → a newer worker owns the job: stop, write nothing more (no outputs, no result).
 *   before the commit point (summary.json) check `await currentGeneration(...) === gen`.
 */
import type { Cluster, Redis } from 'ioredis';
import type { Keys } from './keys.js';

export type RedisClient = Redis | Cluster;

/** Per-job keys expire this long after their last write (the job's BullMQ record is usually gone by then). */
export const JOB_STATE_TTL_MS = 30 * 24 * 3600 * 1000;
/** Streams are capped (approximately) at this many entries. */
export const ITERATIONS_MAXLEN = 100_000;

/** One iteration, as recorded in the iterations stream. */
export interface IterationRecord {
  /** 1-based iteration number. */
  iteration: number;
  inertia: number;
  /** Rows that changed cluster. */
  reassigned: number;
  /** Sum of squared centroid shifts. */
  shift: number;
  /** Wall time of the iteration in ms. */
  ms: number;
}

export async function appendIteration(redis: RedisClient, keys: Keys, jobId: string, rec: IterationRecord): Promise<void> {
  const key = keys.iterations(jobId);
  await redis
    .multi()
    .xadd(key, 'MAXLEN', '~', ITERATIONS_MAXLEN, '*',
      'iteration', String(rec.iteration), 'inertia', String(rec.inertia),
      'reassigned', String(rec.reassigned), 'shift', String(rec.shift), 'ms', String(rec.ms))
    .pexpire(key, JOB_STATE_TTL_MS)
    .exec();
}

/**
 * The iteration history, ordered by iteration. A resumed job repeats the iterations after its last
 * checkpoint; the last record of each iteration number wins.
 */
export async function readIterations(redis: RedisClient, keys: Keys, jobId: string): Promise<IterationRecord[]> {
  const entries = await redis.xrange(keys.iterations(jobId), '-', '+');
  const byIteration = new Map<number, IterationRecord>();
  for (const [, fields] of entries) {
    const f: Record<string, string> = {};
    for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i]] = fields[i + 1];
    const rec: IterationRecord = {
      iteration: Number(f.iteration),
      inertia: Number(f.inertia),
      reassigned: Number(f.reassigned),
      shift: Number(f.shift),
      ms: Number(f.ms),
    };
    byIteration.set(rec.iteration, rec);
  }
  return [...byIteration.values()].sort((a, b) => a.iteration - b.iteration);
}

export interface CheckpointRecord {
  /** The writer's generation (from claimGeneration). */
  generation: number;
  /** Iterations completed in the checkpointed centroids. */
  iteration: number;
  /** s3:// URI of the checkpoint object. */
  uri: string;
  /** specHash of the spec it belongs to; a resume with another hash must ignore it. */
  specHash: string;
  updatedAt: number;
}

/** Takes the next generation for a job: every later write with an older generation is refused. */
export async function claimGeneration(redis: RedisClient, keys: Keys, jobId: string): Promise<number> {
  const key = keys.checkpoint(jobId);
  const [[, gen]] = (await redis.multi().hincrby(key, 'claimed', 1).pexpire(key, JOB_STATE_TTL_MS).exec()) as [
    [Error | null, number],
    unknown,
  ];
  return Number(gen);
}

/** The latest claimed generation (0 if none). */
export async function currentGeneration(redis: RedisClient, keys: Keys, jobId: string): Promise<number> {
  return Number((await redis.hget(keys.checkpoint(jobId), 'claimed')) ?? 0);
}

const WRITE_CHECKPOINT = `
local claimed = tonumber(redis.call('HGET', KEYS[1], 'claimed') or '0')
local gen = tonumber(ARGV[1])
if gen < claimed then return 0 end
local cur = tonumber(redis.call('HGET', KEYS[1], 'generation') or '-1')
local curIt = tonumber(redis.call('HGET', KEYS[1], 'iteration') or '-1')
if gen < cur or (gen == cur and tonumber(ARGV[2]) < curIt) then return 0 end
redis.call('HSET', KEYS[1], 'generation', ARGV[1], 'iteration', ARGV[2], 'uri', ARGV[3], 'specHash', ARGV[4], 'updatedAt', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
`;

/**
 * Records a checkpoint if `generation` is still the newest claim (and the iteration does not go back).
 * Returns false when fenced off: the caller lost the job to a newer worker.
 */
export async function writeCheckpointRecord(
  redis: RedisClient,
  keys: Keys,
  jobId: string,
  rec: Omit<CheckpointRecord, 'updatedAt'> & { updatedAt?: number },
): Promise<boolean> {
  const ok = await redis.eval(
    WRITE_CHECKPOINT, 1, keys.checkpoint(jobId),
    String(rec.generation), String(rec.iteration), rec.uri, rec.specHash,
    String(rec.updatedAt ?? Date.now()), String(JOB_STATE_TTL_MS),
  );
  return Number(ok) === 1;
}

/** The last checkpoint record of a job, or null if none was written. */
export async function readCheckpointRecord(redis: RedisClient, keys: Keys, jobId: string): Promise<CheckpointRecord | null> {
  const h = await redis.hgetall(keys.checkpoint(jobId));
  if (!h.uri) return null;
  return {
    generation: Number(h.generation),
    iteration: Number(h.iteration),
    uri: h.uri,
    specHash: h.specHash,
    updatedAt: Number(h.updatedAt),
  };
}

/** Removes a job's iteration history, checkpoint record and cancel flag. */
export async function clearJobState(redis: RedisClient, keys: Keys, jobId: string): Promise<void> {
  await redis.del(keys.iterations(jobId), keys.checkpoint(jobId), keys.cancel(jobId));
}
