/**
 * The outputs of one job under `<output>/<jobId>/` (docs/DESIGN.md, Outputs): centroids.npy, assignments.npy, optional
 * distances.npy, then summary.json LAST — the commit point. Readers trust nothing under the prefix without it.
 *
 * A worker that has lost the job must never delete or overwrite what the job's owner committed, so an attempt writes
 * only under its own staging prefix, `<output>/<jobId>/_attempts/<attempt>/`, until it commits:
 *
 *   write      each file is one object in the staging prefix that appears whole (a PUT, or a multipart upload completed
 *              only when all its parts are in, aborted otherwise); a stale worker's late PUT lands there, nowhere else
 *   commit     `beginCommit()` (the fence and the cancel check, atomically in Redis, CheckpointStore.beginCommit) →
 *              each staged file copied into place, server-side, each copy fenced → summary.json, fenced → the staging
 *              prefix removed, and with it what earlier attempts of the job left there
 *   discard    deletes this attempt's staging prefix, never a committed key: whatever happens to this attempt, the
 *              outputs someone else committed stand
 *
 * A stalled worker that passed a fence check may still send the one request that followed it: at worst a copy of the
 * same bytes as its successor's (a resumed run is bitwise identical), never a delete. A run that replaces an earlier
 * commit of the same job id with other bytes (a re-run after a lost completion, on a changed dataset) first removes
 * the old summary.json, so no reader ever sees a summary whose checksums the files do not match.
 */
import { createHash, randomBytes } from 'node:crypto';
import { encodeNpy, NpyWriter } from '../../core/index.js';
import type { S3Handle } from '../s3/client.js';
import { S3ObjectNotFoundError } from '../s3/errors.js';
import { copyObject, deleteKeys, deletePrefix, getObjectBuffer, putObjectBuffer } from '../s3/objects.js';
import { childOf, formatS3Uri, type S3Location } from '../s3/uri.js';
import { S3MultipartSink } from './multipart-sink.js';

export interface OutputFile {
  uri: string;
  bytes: number;
  sha256: string;
}

export interface OutputWriterOptions {
  s3: S3Handle;
  /** spec.output, s3://bucket[/prefix] */
  output: string;
  jobId: string;
  /** names this attempt's staging prefix; unique per attempt (the claim generation) */
  attempt: string;
  /** throws when this worker may no longer write (CheckpointStore.assertOwner) */
  fence: () => Promise<void>;
  /** the commit point in Redis: throws when the job was cancelled or lost (CheckpointStore.beginCommit) */
  beginCommit: () => Promise<void>;
  /** aborts the uploads in flight (a cancel, a lost lock) */
  signal?: AbortSignal;
  partBytes?: number;
  partConcurrency?: number;
}

/** Staging prefixes of a job's attempts, under `<output>/<jobId>/`. */
export const ATTEMPTS_DIR = '_attempts';

export class OutputWriter {
  /** files written to the staging prefix, by name */
  private readonly staged = new Map<string, OutputFile & { loc: S3Location }>();
  /** writes not settled yet: discard() waits for them, or an object could appear after its delete */
  private readonly inflight = new Set<Promise<unknown>>();
  /** the files written so far, by name, with their final uris (what summary.json lists) */
  readonly files: Record<string, OutputFile> = {};
  private committed = false;
  private readonly attemptDir: string;

  constructor(private readonly o: OutputWriterOptions) {
    // a claim generation can repeat after Redis lost its data; the random part keeps two attempts apart anyway
    this.attemptDir = `${o.attempt}-${randomBytes(4).toString('hex')}`;
  }

  /** `<output>/<jobId>` */
  get prefix(): string {
    return formatS3Uri(childOf(this.o.output, this.o.jobId));
  }

  uriOf(name: string): string {
    return formatS3Uri(this.finalLoc(name));
  }

  /** centroids.npy: float32 K×D, small enough for one PUT. */
  writeCentroids(centroids: Float32Array, k: number, dims: number): Promise<OutputFile> {
    return this.track(this.stageWhole('centroids.npy', encodeNpy(centroids, [k, dims], '<f4')));
  }

  /**
   * A per-row output (assignments.npy int32, distances.npy float32) streamed through a multipart upload, `chunkRows`
   * at a time from `get(firstRow, count)` (the engine's labels / distances), so N rows never sit whole in memory.
   */
  writeRows(
    name: string,
    descr: '<i4' | '<f4',
    rows: number,
    get: (firstRow: number, count: number) => Int32Array | Float32Array,
    chunkRows = 1 << 20,
  ): Promise<OutputFile> {
    return this.track(this.stageRows(name, descr, rows, get, chunkRows));
  }

  /**
   * The commit: the commit point in Redis, the staged files copied into place, summary.json last, the staging prefix
   * removed. From summary.json on, the outputs are visible.
   */
  async commit(summary: object): Promise<OutputFile> {
    await this.o.beginCommit();
    const files = [...this.staged.entries()];
    await this.retractDifferentCommit(files.map(([name, f]) => [name, f.sha256]));
    await Promise.all(
      files.map(async ([name, f]) => {
        await this.o.fence();
        await copyObject(this.o.s3, f.loc, this.finalLoc(name), f.bytes, this.o.signal);
      }),
    );
    const body = Buffer.from(JSON.stringify(summary, null, 2) + '\n', 'utf8');
    await this.o.fence();
    await putObjectBuffer(this.o.s3, this.finalLoc('summary.json'), body, { ContentType: 'application/json' });
    this.committed = true;
    // the staging prefix of this attempt and whatever earlier (killed) attempts left there: no longer needed
    const attempts = childOf(this.o.output, this.o.jobId, ATTEMPTS_DIR);
    await deletePrefix(this.o.s3, attempts.bucket, `${attempts.key}/`).catch(() => {});
    return { uri: this.uriOf('summary.json'), bytes: body.length, sha256: createHash('sha256').update(body).digest('hex') };
  }

  /**
   * Delete what this attempt staged, once its writes in flight have settled; nothing once committed. Never throws and
   * never touches a committed key.
   */
  async discard(): Promise<void> {
    await Promise.allSettled([...this.inflight]);
    if (this.committed) return;
    const dir = this.stagingLoc('');
    // by prefix: an upload aborted on our side may still have completed on the server's
    const keys = [...this.staged.values()].map((f) => f.loc.key);
    await deleteKeys(this.o.s3, dir.bucket, keys).catch(() => {});
    await deletePrefix(this.o.s3, dir.bucket, dir.key).catch(() => {});
  }

  /**
   * A summary.json already under the prefix (an earlier commit of this job id) whose checksums differ from ours is
   * removed before any file is replaced. The same bytes (a stale worker, a resumed re-run) leave it alone.
   */
  private async retractDifferentCommit(ours: [string, string][]): Promise<void> {
    const loc = this.finalLoc('summary.json');
    let earlier: { checksums?: Record<string, string> };
    try {
      earlier = JSON.parse((await getObjectBuffer(this.o.s3, loc, this.o.signal)).toString('utf8'));
    } catch (err) {
      if (err instanceof S3ObjectNotFoundError || err instanceof SyntaxError) return;
      throw err;
    }
    const same = ours.every(([name, sha]) => earlier.checksums?.[name] === `sha256:${sha}`) && Object.keys(earlier.checksums ?? {}).length === ours.length;
    if (same) return;
    await this.o.fence();
    await deleteKeys(this.o.s3, loc.bucket, [loc.key]);
  }

  private async stageRows(
    name: string,
    descr: '<i4' | '<f4',
    rows: number,
    get: (firstRow: number, count: number) => Int32Array | Float32Array,
    chunkRows: number,
  ): Promise<OutputFile> {
    await this.o.fence();
    const loc = this.stagingLoc(name);
    const sink = new S3MultipartSink(this.o.s3, loc, { partBytes: this.o.partBytes, concurrency: this.o.partConcurrency, signal: this.o.signal });
    const writer = new NpyWriter(sink, descr, [rows]);
    try {
      for (let r = 0; r < rows; r += chunkRows) await writer.write(get(r, Math.min(chunkRows, rows - r)));
      const res = await writer.close();
      const file = { uri: this.uriOf(name), bytes: res.bytes, sha256: res.sha256 };
      this.staged.set(name, { ...file, loc });
      this.files[name] = file;
      return file;
    } catch (err) {
      await writer.abort().catch(() => {});
      throw err;
    }
  }

  private async stageWhole(name: string, body: Buffer): Promise<OutputFile> {
    await this.o.fence();
    const loc = this.stagingLoc(name);
    await putObjectBuffer(this.o.s3, loc, body, { ContentType: 'application/octet-stream' }, this.o.signal);
    const file = { uri: this.uriOf(name), bytes: body.length, sha256: createHash('sha256').update(body).digest('hex') };
    this.staged.set(name, { ...file, loc });
    this.files[name] = file;
    return file;
  }

  private track<T>(write: Promise<T>): Promise<T> {
    this.inflight.add(write);
    const done = () => this.inflight.delete(write);
    write.then(done, done);
    return write;
  }

  private finalLoc(name: string): S3Location {
    return childOf(this.o.output, this.o.jobId, name);
  }

  /** `<output>/<jobId>/_attempts/<attempt>/<name>`; with name '' the prefix itself, ending in '/' */
  private stagingLoc(name: string): S3Location {
    const loc = childOf(this.o.output, this.o.jobId, ATTEMPTS_DIR, this.attemptDir, name);
    return name ? loc : { bucket: loc.bucket, key: `${loc.key}/` };
  }
}
