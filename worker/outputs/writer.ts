/**
 * The outputs of one job under `<output>/<jobId>/` (DESIGN.md, Contracts): centroids.npy, assignments.npy, optional
 * distances.npy, then summary.json LAST — the commit point. Readers trust nothing under the prefix without it.
 *
 * Nothing partial becomes visible: each file is one object that appears whole (a PUT, or a multipart upload that is
 * completed only when all parts are in, aborted otherwise); if the job fails before the commit, discard() deletes the
 * files already written. Writes are fenced: `fence()` runs before each file and again right before summary.json, so a
 * worker that lost the job stops at the next file. (A stalled worker that passed its last check may still finish the
 * PUT it had started; that object holds the same bytes as its successor's, because a resumed run is bitwise
 * identical, and summary.json's sha256 checksums let readers verify every file.)
 */
import { createHash } from 'node:crypto';
import { encodeNpy } from '../formats/npy-encode.js';
import { NpyWriter } from '../formats/npy-writer.js';
import type { S3Handle } from '../s3/client.js';
import { deleteKeys, putObjectBuffer } from '../s3/objects.js';
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
  /** throws when this worker may no longer write (CheckpointStore.assertOwner) */
  fence: () => Promise<void>;
  partBytes?: number;
  partConcurrency?: number;
}

export class OutputWriter {
  private readonly written: S3Location[] = [];
  /** writes not settled yet: discard() waits for them, or an object could appear after its delete */
  private readonly inflight = new Set<Promise<unknown>>();
  readonly files: Record<string, OutputFile> = {};
  private committed = false;

  constructor(private readonly o: OutputWriterOptions) {}

  /** `<output>/<jobId>` */
  get prefix(): string {
    return formatS3Uri(childOf(this.o.output, this.o.jobId));
  }

  uriOf(name: string): string {
    return formatS3Uri(this.loc(name));
  }

  private loc(name: string): S3Location {
    return childOf(this.o.output, this.o.jobId, name);
  }

  /** centroids.npy: float32 K×D, small enough for one PUT. */
  writeCentroids(centroids: Float32Array, k: number, dims: number): Promise<OutputFile> {
    return this.track(this.putWhole('centroids.npy', encodeNpy(centroids, [k, dims], '<f4')));
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
    return this.track(this.streamRows(name, descr, rows, get, chunkRows));
  }

  private async streamRows(
    name: string,
    descr: '<i4' | '<f4',
    rows: number,
    get: (firstRow: number, count: number) => Int32Array | Float32Array,
    chunkRows: number,
  ): Promise<OutputFile> {
    await this.o.fence();
    const loc = this.loc(name);
    const sink = new S3MultipartSink(this.o.s3, loc, { partBytes: this.o.partBytes, concurrency: this.o.partConcurrency });
    const writer = new NpyWriter(sink, descr, [rows]);
    try {
      for (let r = 0; r < rows; r += chunkRows) await writer.write(get(r, Math.min(chunkRows, rows - r)));
      const res = await writer.close();
      this.written.push(loc);
      const file = { uri: formatS3Uri(loc), bytes: res.bytes, sha256: res.sha256 };
      this.files[name] = file;
      return file;
    } catch (err) {
      await writer.abort().catch(() => {});
      throw err;
    }
  }

  /** summary.json, after a last fence check: from here on the outputs are visible. */
  async commit(summary: object): Promise<OutputFile> {
    const file = await this.putWhole('summary.json', Buffer.from(JSON.stringify(summary, null, 2) + '\n', 'utf8'), 'application/json');
    this.committed = true;
    return file;
  }

  /** Delete whatever this writer put, unless committed, once its writes in flight have settled. Never throws. */
  async discard(): Promise<void> {
    await Promise.allSettled([...this.inflight]);
    if (this.committed || this.written.length === 0) return;
    const locs = this.written.splice(0);
    await deleteKeys(this.o.s3, locs[0].bucket, locs.map((l) => l.key)).catch(() => {});
  }

  private track<T>(write: Promise<T>): Promise<T> {
    this.inflight.add(write);
    const done = () => this.inflight.delete(write);
    write.then(done, done);
    return write;
  }

  private async putWhole(name: string, body: Buffer, contentType = 'application/octet-stream'): Promise<OutputFile> {
    await this.o.fence();
    const loc = this.loc(name);
    this.written.push(loc);
    await putObjectBuffer(this.o.s3, loc, body, { ContentType: contentType });
    const file = { uri: formatS3Uri(loc), bytes: body.length, sha256: createHash('sha256').update(body).digest('hex') };
    this.files[name] = file;
    return file;
  }
}
