/**
 * CompleteMultipartUpload for uploads and multipart copies alike, safe against a lost answer: S3 may complete the
 * upload while the answer dies on the wire, and then every retry finds the upload gone (NoSuchUpload on S3, a 500 on
 * s3rver). So a failed try looks at the key and takes the object there as done only when it is the one these parts
 * make: its size AND its ETag. Size alone is not enough: a commit's copy may replace an earlier object of the same size.
 */
import { createHash } from 'node:crypto';
import { CompleteMultipartUploadCommand, HeadObjectCommand, type CompletedPart } from '@aws-sdk/client-s3';
import type { S3Handle } from './client.js';
import { withRetries } from './retry.js';
import type { S3Location } from './uri.js';

export interface MultipartObject {
  /** the object's size in bytes */
  size: number;
  /** every part's number and ETag, in part order */
  parts: CompletedPart[];
  /** quoted hex md5 of the whole object, where the caller knows it: the ETag s3rver gives it (see expectedETag) */
  contentETag?: string;
}

/**
 * S3's ETag for an object completed from these parts: the hex md5 of the concatenated binary md5s of the parts, then
 * `-` and the part count, quoted. Undefined when a part's ETag is missing or not an md5.
 */
export function multipartETag(parts: readonly CompletedPart[]): string | undefined {
  if (parts.length === 0) return undefined;
  const md5 = createHash('md5');
  for (const part of parts) {
    const hex = part.ETag?.replace(/"/g, '');
    if (!hex || !/^[0-9a-f]{32}$/i.test(hex)) return undefined;
    md5.update(Buffer.from(hex, 'hex'));
  }
  return `"${md5.digest('hex')}-${parts.length}"`;
}

/** Completes the upload, retried within the client's budget; returns the object's ETag. */
export async function completeMultipartUpload(
  s3: S3Handle,
  loc: S3Location,
  uploadId: string,
  object: MultipartObject,
  signal?: AbortSignal,
): Promise<string | undefined> {
  const input = { Bucket: loc.bucket, Key: loc.key, UploadId: uploadId, MultipartUpload: { Parts: object.parts } };
  return withRetries(
    async () => {
      try {
        return (await s3.client.send(new CompleteMultipartUploadCommand(input), { abortSignal: signal })).ETag;
      } catch (err) {
        // an earlier try, ours or the SDK's own retry inside this one, may have completed the upload and lost its answer
        const done = signal?.aborted ? undefined : await objectOfThisUpload(s3, loc, object, signal);
        if (done !== undefined) return done;
        throw err;
      }
    },
    s3.settings.retry,
    { signal },
  );
}

/** The ETag of the object at the key when it is the one these parts make, else undefined. */
async function objectOfThisUpload(s3: S3Handle, loc: S3Location, object: MultipartObject, signal?: AbortSignal): Promise<string | undefined> {
  let head;
  try {
    head = await s3.client.send(new HeadObjectCommand({ Bucket: loc.bucket, Key: loc.key }), { abortSignal: signal });
  } catch {
    return undefined; // not there (or not known now): the complete's own error stands
  }
  if (head.ContentLength !== object.size || !head.ETag) return undefined;
  const expected = expectedETag(s3, object);
  return expected === undefined || head.ETag === expected ? head.ETag : undefined;
}

/** Undefined when it cannot be known: then the size alone decides. */
function expectedETag(s3: S3Handle, object: MultipartObject): string | undefined {
  // s3rver 3.7.1 differs from S3: its parts' ETags are md5s as on S3 (it has no UploadPartCopy), but it names the
  // completed object by the md5 of its whole content, not by S3's rule, so only the caller can know that ETag
  if (s3.settings.compat === 's3rver') return object.contentETag;
  return multipartETag(object.parts);
}
