/**
 * A ByteSink (core/formats/npy-writer.ts) that streams into one S3 object: bytes are gathered into parts and sent as
 * Buffers (s3rver mis-stores streamed bodies: ../shared/TOOLCHAIN.md) with a few parts in flight. A small object
 * (less than one part) becomes a single PutObject. On failure the upload is aborted so no parts linger (DESIGN.md,
 * Faults); s3rver answers AbortMultipartUpload with 405, which its compatibility switch tolerates.
 *
 * Every request is retried within the client's time budget (../s3/retry.ts): an S3 blip of a few seconds costs the
 * job nothing. `signal` aborts the requests in flight (a cancel stops a long upload at once).
 *
 * Memory: partBytes × (concurrency + 1) at most, whatever the object's size.
 */
import { createHash, type Hash } from 'node:crypto';
import {
  AbortMultipartUploadCommand,
  CreateMultipartUploadCommand,
  PutObjectCommand,
  UploadPartCommand,
  type CompletedPart,
} from '@aws-sdk/client-s3';
import type { ByteSink } from '../../core/index.js';
import type { S3Handle } from '../s3/client.js';
import { completeMultipartUpload } from '../s3/multipart-complete.js';
import { withRetries } from '../s3/retry.js';
import { formatS3Uri, type S3Location } from '../s3/uri.js';

/** S3's smallest part (all but the last) */
export const MIN_PART_BYTES = 5 * 1024 * 1024;

export interface MultipartSinkOptions {
  partBytes?: number;
  concurrency?: number;
  contentType?: string;
  /** aborts the upload's requests; the sink then fails with the signal's reason */
  signal?: AbortSignal;
}

export class S3MultipartSink implements ByteSink {
  private readonly partBytes: number;
  private readonly concurrency: number;
  private current: Buffer;
  private fill = 0;
  private uploadId: string | undefined;
  private readonly parts: CompletedPart[] = [];
  private readonly inflight = new Set<Promise<void>>();
  private nextPart = 1;
  private failure: unknown;
  private state: 'open' | 'done' | 'aborted' = 'open';
  /** bytes accepted so far */
  bytes = 0;
  /** why AbortMultipartUpload failed, if it did */
  abortError: unknown;
  /** set after end(): the object's ETag */
  etag: string | undefined;
  /** s3rver names a multipart object by this md5 (../s3/multipart-complete.ts); S3 by its parts' */
  private readonly contentMd5: Hash | undefined;

  constructor(
    private readonly s3: S3Handle,
    readonly location: S3Location,
    opts: MultipartSinkOptions = {},
  ) {
    this.partBytes = Math.max(MIN_PART_BYTES, opts.partBytes ?? 8 * 1024 * 1024);
    this.concurrency = Math.max(1, opts.concurrency ?? 4);
    this.contentType = opts.contentType ?? 'application/octet-stream';
    this.signal = opts.signal;
    this.current = Buffer.allocUnsafe(this.partBytes);
    this.contentMd5 = s3.settings.compat === 's3rver' ? createHash('md5') : undefined;
  }
  private readonly contentType: string;
  private readonly signal: AbortSignal | undefined;

  /** One request, retried within the client's budget and aborted by the signal. */
  private send<T>(request: (options: { abortSignal?: AbortSignal }) => Promise<T>): Promise<T> {
    return withRetries(() => request({ abortSignal: this.signal }), this.s3.settings.retry, { signal: this.signal });
  }

  get uri(): string {
    return formatS3Uri(this.location);
  }

  async write(chunk: Uint8Array): Promise<void> {
    this.checkOpen();
    this.contentMd5?.update(chunk);
    let off = 0;
    while (off < chunk.byteLength) {
      const n = Math.min(chunk.byteLength - off, this.partBytes - this.fill);
      this.current.set(chunk.subarray(off, off + n), this.fill);
      this.fill += n;
      off += n;
      this.bytes += n;
      if (this.fill === this.partBytes) await this.flushPart();
    }
  }

  async end(): Promise<void> {
    this.checkOpen();
    if (this.uploadId === undefined) {
      // Everything fit in one part: one PUT, no multipart bookkeeping.
      const body = this.current.subarray(0, this.fill);
      const put = { Bucket: this.location.bucket, Key: this.location.key, Body: body, ContentType: this.contentType };
      const r = await this.send((o) => this.s3.client.send(new PutObjectCommand(put), o));
      this.etag = r.ETag;
      this.state = 'done';
      return;
    }
    if (this.fill > 0) await this.flushPart();
    await this.drain();
    if (this.failure) throw this.failure;
    this.parts.sort((a, b) => a.PartNumber! - b.PartNumber!);
    const object = { size: this.bytes, parts: this.parts, contentETag: this.contentMd5 && `"${this.contentMd5.digest('hex')}"` };
    this.etag = await completeMultipartUpload(this.s3, this.location, this.uploadId, object, this.signal);
    this.state = 'done';
  }

  async abort(): Promise<void> {
    if (this.state !== 'open') return;
    this.state = 'aborted';
    await this.drain();
    if (this.uploadId === undefined) return;
    try {
      await this.s3.client.send(
        new AbortMultipartUploadCommand({ Bucket: this.location.bucket, Key: this.location.key, UploadId: this.uploadId }),
      );
    } catch (err) {
      const status = (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
      // s3rver 3.7.1 does not implement AbortMultipartUpload (405). Elsewhere the failure is kept for the log: abort()
      // never throws (ByteSink contract), and a bucket lifecycle rule on incomplete uploads is the backstop.
      if (!(this.s3.settings.compat === 's3rver' && status === 405)) this.abortError = err;
    }
  }

  private checkOpen(): void {
    if (this.state !== 'open') throw new Error(`upload of ${this.uri} is already ${this.state}`);
    if (this.failure) throw this.failure;
    this.signal?.throwIfAborted();
  }

  private async flushPart(): Promise<void> {
    if (this.uploadId === undefined) {
      const create = { Bucket: this.location.bucket, Key: this.location.key, ContentType: this.contentType };
      const r = await this.send((o) => this.s3.client.send(new CreateMultipartUploadCommand(create), o));
      if (!r.UploadId) throw new Error(`CreateMultipartUpload for ${this.uri} returned no UploadId`);
      this.uploadId = r.UploadId;
    }
    while (this.inflight.size >= this.concurrency) await Promise.race(this.inflight);
    if (this.failure) throw this.failure;
    const body = this.current.subarray(0, this.fill);
    const partNumber = this.nextPart++;
    this.current = Buffer.allocUnsafe(this.partBytes);
    this.fill = 0;
    const upload = { Bucket: this.location.bucket, Key: this.location.key, UploadId: this.uploadId, PartNumber: partNumber, Body: body };
    const p = this.send((o) => this.s3.client.send(new UploadPartCommand(upload), o))
      .then(
        (r) => {
          this.parts.push({ PartNumber: partNumber, ETag: r.ETag });
        },
        (err) => {
          this.failure ??= err;
        },
      )
      .finally(() => this.inflight.delete(p));
    this.inflight.add(p);
  }

  private async drain(): Promise<void> {
    while (this.inflight.size > 0) await Promise.allSettled([...this.inflight]);
  }
}
