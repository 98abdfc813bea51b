/**
 * Lua scripts that make checkpoint and output writes conditional on still owning the job (DESIGN.md, Faults: "a worker
 * that lost its lock can't overwrite a newer checkpoint or outputs"). Two conditions, checked atomically in Redis:
 *
 *   1. the BullMQ lock key of the job still holds this worker's token (the lock has not expired and been re-taken),
 *   2. the claim generation this worker got when it took the job is still the newest (`claimed` in the record).
 *
 * (1) alone is not enough: a stalled worker's lock renewer could win an expired lock key back after another worker
 * took the job; (2) makes ownership monotonic. (2) alone would let a worker whose lock expired keep writing until the
 * next worker claims. The scripts touch only keys under the queue's hash tag, so they run on Redis Cluster too.
 *
 * The record is the HASH keys.checkpoint(jobId) with producer/job-state.ts's field names (its parseCheckpointRecord is
 * the one parser, for the SDK and for store.ts): generation (the writer's claim), iteration, uri, specHash, updatedAt,
 * datasetEtag, sha256, bytes; plus the fencing's own: claimed, claimToken, prevUri.
 */

/** KEYS: lock, record · ARGV: token, ttlMs → claim generation, or -1 if the lock is not ours. */
export const CLAIM_SCRIPT = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local claim = redis.call('HINCRBY', KEYS[2], 'claimed', 1)
redis.call('HSET', KEYS[2], 'claimToken', ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return claim
`;

/** KEYS: lock, record · ARGV: token, claim → 1 owner, -1 lock lost, -2 superseded. */
export const CHECK_SCRIPT = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[2], 'claimed') ~= ARGV[2] then return -2 end
return 1
`;

/**
 * KEYS: lock, record · ARGV: token, claim, iteration, uri, specHash, datasetEtag, sha256, bytes, updatedAt, ttlMs
 * → { 1, uri to delete ('' if none) }, or { -1 } lock lost, { -2 } superseded, { -3 } not newer than the recorded
 * checkpoint of the same spec and data. The previous uri moves to prevUri; the one prevUri held before is returned for
 * deletion (the last two checkpoints are kept). A save the record already holds answers 1 again: ioredis resends a
 * script whose answer was lost, and reading that as "not newer" would delete the object the record names.
 */
export const SAVE_SCRIPT = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, ''} end
if redis.call('HGET', KEYS[2], 'claimed') ~= ARGV[2] then return {-2, ''} end
local rec = redis.call('HMGET', KEYS[2], 'generation', 'iteration', 'uri', 'sha256')
if rec[1] == ARGV[2] and rec[2] == ARGV[3] and rec[3] == ARGV[4] and rec[4] == ARGV[7] then return {1, ''} end
local cur = tonumber(redis.call('HGET', KEYS[2], 'iteration') or '0')
local same = redis.call('HGET', KEYS[2], 'specHash') == ARGV[5] and redis.call('HGET', KEYS[2], 'datasetEtag') == ARGV[6]
if same and tonumber(ARGV[3]) <= cur then return {-3, ''} end
local prev = redis.call('HGET', KEYS[2], 'uri')
local drop = redis.call('HGET', KEYS[2], 'prevUri') or ''
if prev then redis.call('HSET', KEYS[2], 'prevUri', prev) end
redis.call('HSET', KEYS[2], 'generation', ARGV[2], 'iteration', ARGV[3], 'uri', ARGV[4], 'specHash', ARGV[5],
  'datasetEtag', ARGV[6], 'sha256', ARGV[7], 'bytes', ARGV[8], 'updatedAt', ARGV[9])
redis.call('PEXPIRE', KEYS[2], ARGV[10])
return {1, drop}
`;

/**
 * The commit point of the job's outputs. KEYS: lock, record, cancel · ARGV: token, claim, ttlMs → 1 (committing: the
 * record's `committed` holds the claim, and a cancel from now on answers that the job is past its commit point,
 * producer/cancel.ts), -1 lock lost, -2 superseded, -4 a cancel was requested first. Atomic with the cancel's script,
 * so a job is either cancelled with nothing committed or committed with the cancel refused, never both.
 */
export const COMMIT_SCRIPT = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[2], 'claimed') ~= ARGV[2] then return -2 end
if redis.call('EXISTS', KEYS[3]) == 1 then return -4 end
redis.call('HSET', KEYS[2], 'committed', ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
`;
