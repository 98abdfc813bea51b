/**
 * The checkpoint store of one job run (DESIGN.md, step 3 and "after each iteration"): checkpoint bytes go to S3 under
 * `<output>/<jobId>/_checkpoints/`, and a record in Redis says which object is the newest, for which spec and dataset
 * version. Every write is fenced (fence-scripts.ts): a worker that lost the job cannot overwrite a newer checkpoint.
 *
 * The bytes are opaque here (the k-means driver encodes them); the store adds integrity (sha256 in the record,
 * checked on load) and ownership.
 *
 * Object keys are per claim (`c<claim>-a|b.ckpt`, see slot()): two workers never write the same key, so a stale
 * worker can never replace the object a newer record points at. The last two checkpoints are kept.
 *
 * The store also holds the job's commit point in Redis (beginCommit): the outputs (outputs/writer.ts) are committed
 * only by the owner, and only if no cancel came first.
 */
import { createHash } from 'node:crypto';
import { JOB_STATE_TTL_MS, parseCheckpointRecord, type CheckpointRecord as ProducerCheckpointRecord, type RedisClient } from '../../producer/job-state.js';
import type { S3Handle } from '../s3/client.js';
import { S3ObjectNotFoundError } from '../s3/errors.js';
import { deleteKeys, deletePrefix, getObjectBuffer, putObjectBuffer } from '../s3/objects.js';
import { childOf, formatS3Uri, parseS3Uri, type S3Location } from '../s3/uri.js';
import { CancelledBeforeCommitError, FencedError } from './errors.js';
import { CHECK_SCRIPT, CLAIM_SCRIPT, COMMIT_SCRIPT, SAVE_SCRIPT } from './fence-scripts.js';

/** The record as the worker writes it: every field present (producer/job-state.ts parses it). */
export interface CheckpointRecord extends ProducerCheckpointRecord {
  datasetEtag: string;
  sha256: string;
  bytes: number;
}

export interface CheckpointStoreOptions {
  redis: RedisClient;
  s3: S3Handle;
  jobId: string;
  /** the job's output prefix, s3://bucket/prefix (checkpoints go to <output>/<jobId>/_checkpoints/) */
  output: string;
  /** the Redis hash of the job's checkpoint record: keys.checkpoint(jobId) (producer/keys.ts) */
  recordKey: string;
  /** BullMQ's lock key of the job (`${job.queueQualifiedName}:${job.id}:lock`) */
  lockKey: string;
  /** BullMQ's token of this worker's hold on the job */
  token: string;
  /** the job's cancel flag: keys.cancel(jobId) (producer/cancel.ts) */
  cancelKey: string;
}

export class CheckpointStore {
  private claimGen: number | undefined;
  /** uri of this store's last successful save */
  private lastSlot: string | undefined;

  constructor(private readonly o: CheckpointStoreOptions) {}

  /** The claim generation this worker holds, once claim() has run. */
  get claim(): number | undefined {
    return this.claimGen;
  }

  /**
   * Take ownership of the job's writes. Every later save/assertOwner fails once someone else has claimed after us.
   * Throws FencedError when our lock is already gone.
   */
  async claimJob(): Promise<number> {
    const r = Number(await this.o.redis.eval(CLAIM_SCRIPT, 2, this.o.lockKey, this.o.recordKey, this.o.token, String(JOB_STATE_TTL_MS)));
    if (r < 0) throw new FencedError(this.o.jobId, 'lock-lost');
    this.claimGen = r;
    return r;
  }

  /** Throws FencedError unless this worker still holds the lock and the newest claim. */
  async assertOwner(): Promise<void> {
    const claim = this.requireClaim();
    const r = Number(await this.o.redis.eval(CHECK_SCRIPT, 2, this.o.lockKey, this.o.recordKey, this.o.token, String(claim)));
    if (r === -1) throw new FencedError(this.o.jobId, 'lock-lost');
    if (r === -2) throw new FencedError(this.o.jobId, 'superseded');
  }

  /**
   * The commit point: from here on the job completes (a cancel is refused). Throws FencedError when this worker no
   * longer owns the job, CancelledBeforeCommitError when a cancel was requested first.
   */
  async beginCommit(): Promise<void> {
    const claim = this.requireClaim();
    const r = Number(
      await this.o.redis.eval(COMMIT_SCRIPT, 3, this.o.lockKey, this.o.recordKey, this.o.cancelKey, this.o.token, String(claim), String(JOB_STATE_TTL_MS)),
    );
    if (r === -1) throw new FencedError(this.o.jobId, 'lock-lost');
    if (r === -2) throw new FencedError(this.o.jobId, 'superseded');
    if (r === -4) throw new CancelledBeforeCommitError(this.o.jobId);
  }

  /** The recorded checkpoint, if any (whatever its spec or dataset). */
  async record(): Promise<CheckpointRecord | null> {
    const r = parseCheckpointRecord(await this.o.redis.hgetall(this.o.recordKey));
    if (!r) return null;
    // a record without these was not written by a worker: it matches no dataset and fails its checksum, so no resume
    return { ...r, datasetEtag: r.datasetEtag ?? '', sha256: r.sha256 ?? '', bytes: r.bytes ?? 0 };
  }

  /**
   * The bytes of the newest checkpoint made for this spec and dataset version, or null (none, another spec or data,
   * or an object that is missing or fails its checksum: then the run starts over, which is slower but correct).
   */
  async loadLatest(specHash: string, datasetEtag: string): Promise<{ record: CheckpointRecord; bytes: Buffer } | { record: null; reason: string }> {
    const record = await this.record();
    if (!record) return { record: null, reason: 'no checkpoint' };
    if (record.specHash !== specHash) return { record: null, reason: `checkpoint is for spec ${record.specHash}, not ${specHash}` };
    if (record.datasetEtag !== datasetEtag) {
      return { record: null, reason: `checkpoint is for dataset ETag ${record.datasetEtag}, not ${datasetEtag}` };
    }
    let bytes: Buffer;
    try {
      bytes = await getObjectBuffer(this.o.s3, parseS3Uri(record.uri));
    } catch (err) {
      if (err instanceof S3ObjectNotFoundError) return { record: null, reason: `checkpoint object ${record.uri} is missing` };
      throw err;
    }
    const sha = createHash('sha256').update(bytes).digest('hex');
    if (sha !== record.sha256) return { record: null, reason: `checkpoint object ${record.uri} fails its sha256 check` };
    return { record, bytes };
  }

  /**
   * Upload a checkpoint and make it the newest, if this worker still owns the job. A fenced save deletes the object it
   * uploaded and throws FencedError. A checkpoint that is not newer than the recorded one is skipped (returns null).
   */
  async save(iteration: number, bytes: Buffer, specHash: string, datasetEtag: string): Promise<CheckpointRecord | null> {
    const claim = this.requireClaim();
    const loc = this.nextSlot(claim);
    const uri = formatS3Uri(loc);
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    await putObjectBuffer(this.o.s3, loc, bytes, { ContentType: 'application/octet-stream' });
    const updatedAt = Date.now();
    const [status, drop] = (await this.o.redis.eval(
      SAVE_SCRIPT,
      2,
      this.o.lockKey,
      this.o.recordKey,
      this.o.token,
      String(claim),
      String(iteration),
      uri,
      specHash,
      datasetEtag,
      sha256,
      String(bytes.length),
      String(updatedAt),
      String(JOB_STATE_TTL_MS),
    )) as [number, string];
    if (status < 0) {
      await deleteKeys(this.o.s3, loc.bucket, [loc.key]).catch(() => {});
      if (status === -3) return null;
      throw new FencedError(this.o.jobId, status === -1 ? 'lock-lost' : 'superseded');
    }
    this.lastSlot = uri;
    // Our own two slots are overwritten in turn, never deleted; an older claim's (a dead worker's) are.
    if (drop && drop !== formatS3Uri(this.slotOf(claim, 'a')) && drop !== formatS3Uri(this.slotOf(claim, 'b'))) {
      const old = parseS3Uri(drop);
      await deleteKeys(this.o.s3, old.bucket, [old.key]).catch(() => {});
    }
    return { generation: claim, iteration, uri, specHash, datasetEtag, sha256, bytes: bytes.length, updatedAt };
  }

  /**
   * Remove every checkpoint object of the job (after the outputs are committed, or when the job ends for good), found
   * by prefix: a worker killed between a checkpoint's PUT and its record leaves an object that no record names. Best
   * effort, and only while this worker owns the job.
   */
  async cleanup(): Promise<void> {
    try {
      await this.assertOwner();
    } catch {
      return;
    }
    const dir = childOf(this.o.output, this.o.jobId, '_checkpoints');
    await deletePrefix(this.o.s3, dir.bucket, `${dir.key}/`).catch(() => {});
  }

  /**
   * Where a checkpoint goes: two slots per claim (`c<claim>-a.ckpt`, `c<claim>-b.ckpt`), and never the slot of this
   * store's last successful save — the one the record points at — so a save that then fails or is fenced never
   * damages the newest checkpoint. A worker never writes another claim's slots, and nothing needs deleting while the
   * job runs (one request less per checkpoint). Readers check the sha256 anyway.
   */
  private nextSlot(claim: number): S3Location {
    const a = this.slotOf(claim, 'a');
    return this.lastSlot === formatS3Uri(a) ? this.slotOf(claim, 'b') : a;
  }

  private slotOf(claim: number, which: 'a' | 'b'): S3Location {
    return childOf(this.o.output, this.o.jobId, '_checkpoints', `c${claim}-${which}.ckpt`);
  }

  /** The claim generation this worker holds; throws before claimJob(). */
  requireClaim(): number {
    if (this.claimGen === undefined) throw new Error('CheckpointStore: claimJob() first');
    return this.claimGen;
  }
}
