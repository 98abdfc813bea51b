/**
 * Lua scripts that make checkpoint and output writes conditional on still owning the job (DESIGN.md, Faults: "a worker
 * that lost its lock can't overwrite a newer checkpoint or outputs"). Two conditions, checked atomically in Redis:
 *
 *   1. the BullMQ lock key of the job still holds this worker's token (the lock has not expired and been re-taken),
 *   2. the claim generation in the job's checkpoint record is still the one this worker got when it started the job.
 *
 * (1) alone is not enough: a lock that expired and was re-acquired by another worker could, in principle, be
 * re-extended by the first one's lock renewer; (2) makes ownership monotonic. Every script touches only keys that share
 * the queue's hash tag, so they run on Redis Cluster too.
 *
 * Record fields (a hash): claim (counter), claimToken, generation (checkpoint sequence), iteration, uri, specHash,
 * datasetEtag, sha256, bytes, savedAt, prevUri.
 */

/** KEYS: lock, record · ARGV: token → claim generation, or -1 if the lock is not ours. */
export const CLAIM_SCRIPT = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local claim = redis.call('HINCRBY', KEYS[2], 'claim', 1)
redis.call('HSET', KEYS[2], 'claimToken', ARGV[1])
return claim
`;

/** KEYS: lock, record · ARGV: token, claim → 1 owner, -1 lock lost, -2 superseded. */
export const CHECK_SCRIPT = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('HGET', KEYS[2], 'claim') ~= ARGV[2] then return -2 end
return 1
`;

/**
 * KEYS: lock, record · ARGV: token, claim, iteration, uri, specHash, datasetEtag, sha256, bytes, savedAt
 * → { generation, uri to delete ('' if none) }, or { -1 } lock lost, { -2 } superseded, { -3 } not newer than the
 * recorded checkpoint of the same spec and data. The previous uri moves to prevUri; the one prevUri held before is
 * returned for deletion (the last two checkpoints are kept).
 */
export const SAVE_SCRIPT = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {-1, ''} end
if redis.call('HGET', KEYS[2], 'claim') ~= ARGV[2] then return {-2, ''} end
local cur = tonumber(redis.call('HGET', KEYS[2], 'iteration') or '0')
local same = redis.call('HGET', KEYS[2], 'specHash') == ARGV[5] and redis.call('HGET', KEYS[2], 'datasetEtag') == ARGV[6]
if same and tonumber(ARGV[3]) <= cur then return {-3, ''} end
local gen = redis.call('HINCRBY', KEYS[2], 'generation', 1)
local prev = redis.call('HGET', KEYS[2], 'uri')
local drop = redis.call('HGET', KEYS[2], 'prevUri') or ''
if prev then redis.call('HSET', KEYS[2], 'prevUri', prev) end
redis.call('HSET', KEYS[2], 'iteration', ARGV[3], 'uri', ARGV[4], 'specHash', ARGV[5], 'datasetEtag', ARGV[6],
  'sha256', ARGV[7], 'bytes', ARGV[8], 'savedAt', ARGV[9])
return {gen, drop}
`;
