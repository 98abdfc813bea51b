/**
 * The object operations the worker needs, each with the error mapping callers rely on: missing → S3ObjectNotFoundError,
 * changed since pinned → S3ObjectChangedError, truncated → retried. Ranged reads land straight in the caller's buffer
 * (DESIGN.md, Streaming: no intermediate copy of the whole range).
 */
import {
  AbortMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  UploadPartCopyCommand,
  type CompletedPart,
  type PutObjectCommandInput,
} from '@aws-sdk/client-s3';
import type { S3Handle } from './client.js';
import { DIRECT_BODY, type DirectBody } from './direct-read.js';
import { S3ObjectChangedError, S3ObjectNotFoundError, S3ShortReadError } from './errors.js';
import { completeMultipartUpload } from './multipart-complete.js';
import { withRetries } from './retry.js';
import { formatS3Uri, type S3Location } from './uri.js';

export interface ObjectInfo {
  size: number;
  etag: string;
  lastModified?: Date;
}

function status(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
}
function isNotFound(err: unknown): boolean {
  const name = (err as { name?: string })?.name;
  return name === 'NoSuchKey' || name === 'NotFound' || status(err) === 404;
}
function isInvalidRange(err: unknown): boolean {
  const name = (err as { name?: string })?.name;
  return name === 'InvalidRange' || status(err) === 416;
}
function isPreconditionFailed(err: unknown): boolean {
  const name = (err as { name?: string })?.name;
  return name === 'PreconditionFailed' || status(err) === 412;
}

export async function headObject(s3: S3Handle, loc: S3Location, signal?: AbortSignal): Promise<ObjectInfo> {
  try {
    const r = await s3.client.send(new HeadObjectCommand({ Bucket: loc.bucket, Key: loc.key }), { abortSignal: signal });
    if (r.ContentLength === undefined || !r.ETag) throw new Error(`HEAD ${formatS3Uri(loc)}: no size or ETag in the answer`);
    return { size: r.ContentLength, etag: r.ETag, lastModified: r.LastModified };
  } catch (err) {
    if (isNotFound(err)) throw new S3ObjectNotFoundError(formatS3Uri(loc));
    throw err;
  }
}

export interface ObjectStart extends ObjectInfo {
  /** the object's first min(length, size) bytes */
  bytes: Buffer;
}

/**
 * Size, ETag and the first `length` bytes of an object in ONE ranged GET, where a HEAD and a GET took two round trips
 * before opening a dataset: the answer's Content-Range carries the object's size. An empty object, which has no byte to
 * range over (416), is asked with a HEAD. Missing → S3ObjectNotFoundError; a body cut short is retried.
 */
export async function readObjectStart(s3: S3Handle, loc: S3Location, length: number, signal?: AbortSignal): Promise<ObjectStart> {
  const uri = formatS3Uri(loc);
  return withRetries(
    async () => {
      let r;
      try {
        r = await s3.client.send(new GetObjectCommand({ Bucket: loc.bucket, Key: loc.key, Range: `bytes=0-${Math.max(1, length) - 1}` }), { abortSignal: signal });
      } catch (err) {
        if (isNotFound(err)) throw new S3ObjectNotFoundError(uri);
        if (isInvalidRange(err)) {
          const info = await headObject(s3, loc, signal);
          if (info.size === 0) return { ...info, bytes: Buffer.alloc(0) };
        }
        throw err;
      }
      // "bytes 0-99/1234"; a server that ignores Range answers 200 with the whole object
      const total = r.ContentRange ? /\/(\d+)$/.exec(r.ContentRange)?.[1] : r.ContentLength;
      const size = total === undefined ? NaN : Number(total);
      if (!Number.isSafeInteger(size) || !r.ETag) {
        (r.Body as { destroy?: () => void } | undefined)?.destroy?.();
        throw new Error(`GET ${uri}: no size or ETag in the answer`);
      }
      const want = Math.min(length, size);
      const bytes = Buffer.allocUnsafe(want);
      let got = 0;
      for await (const chunk of r.Body as AsyncIterable<Uint8Array>) {
        const n = Math.min(chunk.byteLength, want - got);
        bytes.set(chunk.subarray(0, n), got);
        got += n;
        if (got === want) break; // (leaving the loop closes the body: a server that ignored Range sent all of it)
      }
      if (got !== want) throw new S3ShortReadError(`GET ${uri} bytes=0-${want - 1}: got ${got} of ${want} bytes`);
      return { size, etag: r.ETag, lastModified: r.LastModified, bytes };
    },
    s3.settings.retry,
    { signal },
  );
}

/**
 * Fails with a NoSuchBucket error (named by the S3 client) when the bucket does not exist. The worker asks this of the
 * output bucket before it computes anything: otherwise a typo in `output` is found at the first checkpoint or, with
 * checkpoints off, only after the whole run.
 *
 * Asked as a listing of zero keys (ListObjectsV2, MaxKeys 0), not HeadBucket: on S3 both are one round trip that needs
 * s3:ListBucket and answers 404 NoSuchBucket for a missing bucket (the listing with a body, so the SDK names the code
 * itself), but s3rver answers a bucket HEAD with a full listing — readdir and stat of every object, synchronously on
 * its one thread —, which holds back the dataset's header GET sent beside it once a few jobs' outputs are in the
 * bucket. A zero-key listing reads nothing there.
 */
export async function assertBucketExists(s3: S3Handle, bucket: string): Promise<void> {
  try {
    await s3.client.send(new ListObjectsV2Command({ Bucket: bucket, MaxKeys: 0 }));
  } catch (err) {
    // a server that answers without the code in a body: a 404 on the bucket can only mean the bucket
    if (isNotFound(err)) Object.assign(err as object, { name: 'NoSuchBucket', s3Bucket: bucket });
    throw err;
  }
}

export async function objectExists(s3: S3Handle, loc: S3Location): Promise<boolean> {
  try {
    await headObject(s3, loc);
    return true;
  } catch (err) {
    if (err instanceof S3ObjectNotFoundError) return false;
    throw err;
  }
}

export interface RangeReadOptions {
  /** ETag pinned when the object was opened: sent as If-Match AND compared with the answer (s3rver ignores If-Match) */
  etag?: string;
  signal?: AbortSignal;
  /**
   * After each piece of the body lands: bytes of the range now in place (from its start). A retry starts again from
   * 0 and writes the same bytes (the ETag is pinned), so a caller may keep the largest value seen.
   */
  onProgress?: (bytes: number) => void;
}

/**
 * Read bytes [start, start+length) into target[targetOffset...]. Retries the whole range on resets and truncation.
 */
export async function readRangeInto(
  s3: S3Handle,
  loc: S3Location,
  start: number,
  length: number,
  target: Uint8Array,
  targetOffset: number,
  opts: RangeReadOptions = {},
): Promise<void> {
  if (length === 0) return;
  if (targetOffset + length > target.byteLength) throw new RangeError(`range of ${length} bytes does not fit the target`);
  const uri = formatS3Uri(loc);
  await withRetries(
    async () => {
      let r;
      // with the client's DirectReadHandler (./direct-read.ts) the body lands in target before send() returns
      const direct: DirectBody = { target, offset: targetOffset, length, onProgress: opts.onProgress, etag: opts.etag };
      try {
        r = await s3.client.send(
          new GetObjectCommand({ Bucket: loc.bucket, Key: loc.key, Range: `bytes=${start}-${start + length - 1}`, IfMatch: opts.etag }),
          { abortSignal: opts.signal, [DIRECT_BODY]: direct } as { abortSignal?: AbortSignal },
        );
      } catch (err) {
        if (isPreconditionFailed(err)) throw new S3ObjectChangedError(uri, opts.etag ?? '', undefined);
        if (isNotFound(err)) throw opts.etag ? new S3ObjectChangedError(uri, opts.etag, '(deleted)') : new S3ObjectNotFoundError(uri);
        throw err;
      }
      const body = r.Body as AsyncIterable<Uint8Array> & { destroy?: () => void };
      if (opts.etag !== undefined && r.ETag !== undefined && r.ETag !== opts.etag) {
        body?.destroy?.();
        throw new S3ObjectChangedError(uri, opts.etag, r.ETag);
      }
      if (direct.written !== undefined) {
        if (direct.written !== length) throw new S3ShortReadError(`GET ${uri} bytes=${start}-${start + length - 1}: got ${direct.written} of ${length} bytes`);
        return;
      }
      let written = 0;
      for await (const chunk of body) {
        if (written + chunk.byteLength > length) {
          (body as { destroy?: () => void }).destroy?.();
          throw new S3ShortReadError(`GET ${uri} bytes=${start}-${start + length - 1}: server sent more than asked`);
        }
        target.set(chunk, targetOffset + written);
        written += chunk.byteLength;
        opts.onProgress?.(written);
      }
      if (written !== length) {
        throw new S3ShortReadError(`GET ${uri} bytes=${start}-${start + length - 1}: got ${written} of ${length} bytes`);
      }
    },
    s3.settings.retry,
    { signal: opts.signal },
  );
}

/** A whole (small) object as a Buffer: checkpoints, headers, summaries. */
export async function getObjectBuffer(s3: S3Handle, loc: S3Location, signal?: AbortSignal): Promise<Buffer> {
  return withRetries(
    async () => {
      let r;
      try {
        r = await s3.client.send(new GetObjectCommand({ Bucket: loc.bucket, Key: loc.key }), { abortSignal: signal });
      } catch (err) {
        if (isNotFound(err)) throw new S3ObjectNotFoundError(formatS3Uri(loc));
        throw err;
      }
      const parts: Buffer[] = [];
      for await (const chunk of r.Body as AsyncIterable<Uint8Array>) parts.push(Buffer.from(chunk));
      const buf = Buffer.concat(parts);
      if (r.ContentLength !== undefined && buf.length !== r.ContentLength) {
        throw new S3ShortReadError(`GET ${formatS3Uri(loc)}: got ${buf.length} of ${r.ContentLength} bytes`);
      }
      return buf;
    },
    s3.settings.retry,
    { signal },
  );
}

/**
 * One PUT of a Buffer (a Buffer body, never a stream: see the s3rver note in client.ts), retried within the client's
 * time budget (a PUT of the same bytes is idempotent). Returns the ETag.
 */
export async function putObjectBuffer(
  s3: S3Handle,
  loc: S3Location,
  body: Buffer,
  extra: Omit<PutObjectCommandInput, 'Bucket' | 'Key' | 'Body'> = {},
  signal?: AbortSignal,
): Promise<string | undefined> {
  return withRetries(
    async () => {
      const r = await s3.client.send(new PutObjectCommand({ Bucket: loc.bucket, Key: loc.key, Body: body, ...extra }), { abortSignal: signal });
      return r.ETag;
    },
    s3.settings.retry,
    { signal },
  );
}

/**
 * Delete keys (missing ones are fine), each retried within the client's time budget. One DeleteObject each, 8 at a
 * time: the batch call needs a Content-MD5 that the SDK's newer checksums replace, which some S3 look-alikes reject.
 */
export async function deleteKeys(s3: S3Handle, bucket: string, keys: string[]): Promise<void> {
  for (let i = 0; i < keys.length; i += 8) {
    await Promise.all(
      keys.slice(i, i + 8).map((Key) => withRetries(() => s3.client.send(new DeleteObjectCommand({ Bucket: bucket, Key })), s3.settings.retry)),
    );
  }
}

/**
 * Every key under a prefix, paged with StartAfter (s3rver's continuation tokens need a cipher that Node ≥ 17 lacks).
 */
export async function listKeys(s3: S3Handle, bucket: string, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  let startAfter: string | undefined;
  for (;;) {
    const r = await withRetries(
      () => s3.client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ...(startAfter ? { StartAfter: startAfter } : {}) })),
      s3.settings.retry,
    );
    const page = (r.Contents ?? []).map((o) => o.Key!).filter((k) => k !== undefined);
    keys.push(...page);
    if (!r.IsTruncated || page.length === 0) return keys;
    startAfter = page[page.length - 1];
  }
}

/** Delete every key under a prefix. */
export async function deletePrefix(s3: S3Handle, bucket: string, prefix: string): Promise<number> {
  const keys = await listKeys(s3, bucket, prefix);
  await deleteKeys(s3, bucket, keys);
  return keys.length;
}

/** S3's largest single CopyObject; larger objects are copied in parts (UploadPartCopy). */
export const MAX_COPY_OBJECT_BYTES = 5 * 1024 ** 3;
const COPY_PART_BYTES = 1024 ** 3;

/**
 * A server-side copy of `size` bytes from one key to another of the same bucket, retried within the client's time
 * budget: one CopyObject up to 5 GiB, else a multipart copy of 1 GiB parts (copyObjectInParts).
 */
export async function copyObject(s3: S3Handle, from: S3Location, to: S3Location, size: number, signal?: AbortSignal): Promise<void> {
  if (size <= MAX_COPY_OBJECT_BYTES) {
    const input = { Bucket: to.bucket, Key: to.key, CopySource: copySourceOf(from) };
    await withRetries(() => s3.client.send(new CopyObjectCommand(input), { abortSignal: signal }), s3.settings.retry, { signal });
    return;
  }
  await copyObjectInParts(s3, from, to, size, COPY_PART_BYTES, signal);
}

/**
 * A server-side multipart copy of `size` bytes in parts of `partBytes` (S3 takes 5 MiB to 5 GiB, the last part
 * less), four at a time, each request retried within the client's time budget; aborted if it fails. A complete whose
 * answer was lost is taken as done once the key holds the object these parts make (./multipart-complete.ts).
 */
export async function copyObjectInParts(
  s3: S3Handle,
  from: S3Location,
  to: S3Location,
  size: number,
  partBytes: number,
  signal?: AbortSignal,
): Promise<void> {
  const source = copySourceOf(from);
  const retried = <T>(fn: () => Promise<T>) => withRetries(fn, s3.settings.retry, { signal });
  // s3rver names the copy by the md5 of its content, which there is the source's ETag (./multipart-complete.ts)
  const contentETag = s3.settings.compat === 's3rver' ? (await retried(() => headObject(s3, from, signal))).etag : undefined;
  const created = await retried(() => s3.client.send(new CreateMultipartUploadCommand({ Bucket: to.bucket, Key: to.key }), { abortSignal: signal }));
  const uploadId = created.UploadId;
  if (!uploadId) throw new Error(`CreateMultipartUpload for ${formatS3Uri(to)} returned no UploadId`);
  try {
    const count = Math.ceil(size / partBytes);
    const parts: CompletedPart[] = [];
    for (let first = 0; first < count; first += 4) {
      const batch = Array.from({ length: Math.min(4, count - first) }, (_, i) => first + i);
      parts.push(
        ...(await Promise.all(
          batch.map(async (i) => {
            const end = Math.min(size, (i + 1) * partBytes) - 1;
            const r = await retried(() =>
              s3.client.send(
                new UploadPartCopyCommand({
                  Bucket: to.bucket, Key: to.key, UploadId: uploadId, PartNumber: i + 1, CopySource: source, CopySourceRange: `bytes=${i * partBytes}-${end}`,
                }),
                { abortSignal: signal },
              ),
            );
            return { PartNumber: i + 1, ETag: r.CopyPartResult?.ETag };
          }),
        )),
      );
    }
    await completeMultipartUpload(s3, to, uploadId, { size, parts, contentETag }, signal);
  } catch (err) {
    await s3.client.send(new AbortMultipartUploadCommand({ Bucket: to.bucket, Key: to.key, UploadId: uploadId })).catch(() => {});
    throw err;
  }
}

/** `bucket/key` with each key segment URL-encoded, as CopySource takes it */
function copySourceOf(from: S3Location): string {
  return `${from.bucket}/${from.key.split('/').map(encodeURIComponent).join('/')}`;
}
