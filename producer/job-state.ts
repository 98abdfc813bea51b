/**
 * Per-job state in Redis that the worker writes while a job runs: the iteration history (a STREAM) and
 * the checkpoint record (a HASH). This module reads the record; its one writer is the worker's checkpoint store
 * (worker/checkpoints/store.ts + fence-scripts.ts), whose Lua scripts fence every write by the BullMQ lock token
 * and the newest claim generation, so a worker that lost its lock cannot overwrite what its successor wrote.
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

/**
 * KEYS: iterations stream, lock · ARGV: maxlen, ttlMs, token, claim, then the entry's field/value pairs (iteration
 * first, claim last) → 1 written (or already written), 0 the lock no longer holds the token (the job is gone, after a Redis restart
 * without persistence, or someone else's). One claim writes its iterations in order on one connection, so an entry of
 * this claim at the stream's end with this iteration or a later one means this append already ran: ioredis resent it
 * after a reconnect because its answer was lost.
 */
const APPEND_FENCED_SCRIPT = `
if redis.call('GET', KEYS[2]) ~= ARGV[3] then return 0 end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
if last then
  local f, it, claim = last[2], nil, nil
  for i = 1, #f - 1, 2 do
    if f[i] == 'iteration' then it = tonumber(f[i + 1]) elseif f[i] == 'claim' then claim = f[i + 1] end
  end
  if claim == ARGV[4] and it and it >= tonumber(ARGV[6]) then return 1 end
end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, 5))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;

/** The worker that appends: its BullMQ lock (key and token) and its claim generation (worker/checkpoints/store.ts). */
export interface IterationWriter {
  key: string;
  token: string;
  claim: number;
}

/**
 * Appends one iteration to the job's stream. With `writer` the write is fenced and idempotent: nothing is written,
 * and false is returned, unless the lock still holds the token; an append resent after a lost answer is not written
 * twice. A worker never leaves entries for a job that no longer exists or is no longer its own.
 */
export async function appendIteration(
  redis: RedisClient,
  keys: Keys,
  jobId: string,
  rec: IterationRecord,
  writer?: IterationWriter,
): Promise<boolean> {
  const key = keys.iterations(jobId);
  const fields = ['iteration', String(rec.iteration), 'inertia', String(rec.inertia),
    'reassigned', String(rec.reassigned), 'shift', String(rec.shift), 'ms', String(rec.ms)];
  if (writer) {
    const claim = String(writer.claim);
    const r = await redis.eval(APPEND_FENCED_SCRIPT, 2, key, writer.key, String(ITERATIONS_MAXLEN), String(JOB_STATE_TTL_MS),
      writer.token, claim, ...fields, 'claim', claim);
    return Number(r) === 1;
  }
  const replies = await redis
    .multi()
    .xadd(key, 'MAXLEN', '~', ITERATIONS_MAXLEN, '*', ...fields)
    .pexpire(key, JOB_STATE_TTL_MS)
    .exec();
  // EXEC answers command by command: a failed XADD (say WRONGTYPE) does not reject exec(), it is in its reply
  if (replies === null) throw new Error(`iteration ${rec.iteration} of job ${jobId} was not recorded: the transaction was discarded`);
  const failed = replies.find(([err]) => err);
  if (failed) throw failed[0];
  return true;
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
  /** The writer's claim generation (worker/checkpoints/store.ts). */
  generation: number;
  /** Iterations completed in the checkpointed centroids. */
  iteration: number;
  /** s3:// URI of the checkpoint object. */
  uri: string;
  /** specHash of the spec it belongs to; a resume with another hash must ignore it. */
  specHash: string;
  updatedAt: number;
  /** ETag of the dataset it was computed on (a resume on another version must ignore it); set by every worker write. */
  datasetEtag?: string;
  /** sha256 (hex) of the checkpoint object's bytes, checked on load; set by every worker write. */
  sha256?: string;
  /** size of the checkpoint object; set by every worker write. */
  bytes?: number;
}

/**
 * The one parser of the checkpoint record HASH (HGETALL's answer), shared by this module and the worker's checkpoint
 * store: null when there is no record. Fields the hash lacks are left out, not invented.
 */
export function parseCheckpointRecord(h: Record<string, string>): CheckpointRecord | null {
  if (!h.uri) return null;
  const rec: CheckpointRecord = {
    generation: Number(h.generation),
    iteration: Number(h.iteration),
    uri: h.uri,
    specHash: h.specHash,
    updatedAt: Number(h.updatedAt),
  };
  if (h.datasetEtag !== undefined) rec.datasetEtag = h.datasetEtag;
  if (h.sha256 !== undefined) rec.sha256 = h.sha256;
  if (h.bytes !== undefined) rec.bytes = Number(h.bytes);
  return rec;
}

/** The last checkpoint record of a job, or null if none was written. */
export async function readCheckpointRecord(redis: RedisClient, keys: Keys, jobId: string): Promise<CheckpointRecord | null> {
  return parseCheckpointRecord(await redis.hgetall(keys.checkpoint(jobId)));
}

/** Removes a job's iteration history, checkpoint record and cancel flag. */
export async function clearJobState(redis: RedisClient, keys: Keys, jobId: string): Promise<void> {
  await redis.del(keys.iterations(jobId), keys.checkpoint(jobId), keys.cancel(jobId));
}
