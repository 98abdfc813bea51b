/**
 * The complete's check of the object at the key on S3 (compat 'none'), which s3rver cannot show (it names a multipart
 * object by its content's md5): a client stub whose complete fails with NoSuchUpload and whose HEAD returns a given
 * object. The fault suite (test/faults/s3-copy.test.ts) runs the same code against s3rver.
 */
import { createHash } from 'node:crypto';
import { CompleteMultipartUploadCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import type { S3Handle } from '../../worker/s3/client.js';
import { completeMultipartUpload, multipartETag } from '../../worker/s3/multipart-complete.js';

const md5 = (b: Buffer) => createHash('md5').update(b).digest();
const a = Buffer.alloc(5 * 1024 * 1024, 1);
const b = Buffer.from('the last part');
const parts = [
  { PartNumber: 1, ETag: `"${md5(a).toString('hex')}"` },
  { PartNumber: 2, ETag: `"${md5(b).toString('hex')}"` },
];
// S3's rule, spelled out: md5 over the parts' binary md5s, then "-" and the part count
const s3ETag = `"${createHash('md5').update(Buffer.concat([md5(a), md5(b)])).digest('hex')}-2"`;
const size = a.length + b.length;

/** A client whose complete's answer was lost before: NoSuchUpload, and `head` at the key (undefined: none). */
function afterLostAnswer(head: { ContentLength: number; ETag: string } | undefined): S3Handle {
  const send = async (command: unknown) => {
    if (command instanceof CompleteMultipartUploadCommand) {
      throw Object.assign(new Error('The specified upload does not exist.'), { name: 'NoSuchUpload', $metadata: { httpStatusCode: 404 } });
    }
    if (command instanceof HeadObjectCommand && head) return head;
    throw Object.assign(new Error('NotFound'), { name: 'NotFound', $metadata: { httpStatusCode: 404 } });
  };
  return { client: { send } as unknown as S3Handle['client'], settings: { compat: 'none', retry: { budgetMs: 1000, attempts: 2, baseMs: 1, maxMs: 2 } }, destroy() {} };
}

const loc = { bucket: 'out', key: 'final/x.bin' };

describe('completeMultipartUpload on S3', () => {
  it('multipartETag follows S3 rule; a missing or non-md5 part ETag gives none', () => {
    expect(multipartETag(parts)).toBe(s3ETag);
    expect(multipartETag([parts[0]!, { PartNumber: 2 }])).toBeUndefined();
    expect(multipartETag([parts[0]!, { PartNumber: 2, ETag: '"not-an-md5"' }])).toBeUndefined();
    expect(multipartETag([])).toBeUndefined();
  });

  it('a lost answer: the object with the ETag and size these parts make is taken as done', async () => {
    const s3 = afterLostAnswer({ ContentLength: size, ETag: s3ETag });
    await expect(completeMultipartUpload(s3, loc, 'u1', { size, parts })).resolves.toBe(s3ETag);
  });

  it('another object at the key is refused: another ETag of the same size, or the right ETag at another size', async () => {
    const other = `"${createHash('md5').update('other parts').digest('hex')}-2"`;
    await expect(completeMultipartUpload(afterLostAnswer({ ContentLength: size, ETag: other }), loc, 'u1', { size, parts })).rejects.toMatchObject({ name: 'NoSuchUpload' });
    await expect(completeMultipartUpload(afterLostAnswer({ ContentLength: size - 1, ETag: s3ETag }), loc, 'u1', { size, parts })).rejects.toMatchObject({ name: 'NoSuchUpload' });
    await expect(completeMultipartUpload(afterLostAnswer(undefined), loc, 'u1', { size, parts })).rejects.toMatchObject({ name: 'NoSuchUpload' });
    // the content's md5 is s3rver's name for the object, not S3's
    const contentETag = `"${createHash('md5').update(Buffer.concat([a, b])).digest('hex')}"`;
    await expect(
      completeMultipartUpload(afterLostAnswer({ ContentLength: size, ETag: contentETag }), loc, 'u1', { size, parts, contentETag }),
    ).rejects.toMatchObject({ name: 'NoSuchUpload' });
  });

  it('a part without an ETag: the size alone decides', async () => {
    const unnamed = [parts[0]!, { PartNumber: 2 }];
    const other = `"${createHash('md5').update('whatever').digest('hex')}-2"`;
    await expect(completeMultipartUpload(afterLostAnswer({ ContentLength: size, ETag: other }), loc, 'u1', { size, parts: unnamed })).resolves.toBe(other);
    await expect(completeMultipartUpload(afterLostAnswer({ ContentLength: size + 1, ETag: other }), loc, 'u1', { size, parts: unnamed })).rejects.toMatchObject({ name: 'NoSuchUpload' });
  });
});
