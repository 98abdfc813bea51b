/**
 * Faults on the multipart copy that puts a staged output over 5 GiB into place at commit (copyObjectInParts, here with
 * 1 MiB parts), and on the complete both it and the multipart sink use: s3rver behind the part-copy server
 * (test/helpers/s3-part-copy.ts: s3rver has no UploadPartCopy) behind the fault proxy (test/helpers/s3-fault-proxy.ts).
 *   - the complete's answer lost after s3rver did it (its retries then get a 500): the copy is done, the bytes exact;
 *   - part copies whose answers are lost: their retries are harmless, the bytes exact;
 *   - the key holds another object of the same size (an earlier commit's) and the complete never goes through: the
 *     copy fails and leaves that object be, as does the sink's end(); neither takes it for its own.
 */
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3MultipartSink } from '../../worker/outputs/multipart-sink.js';
import { createS3, type S3Handle } from '../../worker/s3/client.js';
import { copyObjectInParts } from '../../worker/s3/objects.js';
import { loseAnswer, reply, slowDown, startS3FaultProxy, type ProxiedRequest, type S3Fault, type S3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { startS3PartCopy } from '../helpers/s3-part-copy.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');
const MiB = 1024 * 1024;

type Op = 'create' | 'part-copy' | 'part' | 'complete' | 'abort';
const opOf = (r: ProxiedRequest): Op | undefined => {
  if (r.operation === 'UploadPart') return r.headers['x-amz-copy-source'] ? 'part-copy' : 'part';
  return ({ CreateMultipartUpload: 'create', CompleteMultipartUpload: 'complete', AbortMultipartUpload: 'abort' } as const)[r.operation as string];
};

describe('faults on the multipart copy and on completing multipart uploads', () => {
  let s3: S3ServerHandle;
  let copying: S3ServerHandle;
  let proxy: S3FaultProxy;
  let client: S3Handle;
  /** the fault for each multipart request (tries: how many of this op and part number were seen, this one included) */
  let policy: (op: Op, tries: number, partNumber: string | null) => S3Fault | undefined = () => undefined;
  let seen = new Map<string, number>();
  let mark = 0;
  /** "op fault" of the faults injected since `mark` */
  const faults = () => proxy.requests.slice(mark).filter((r) => r.fault).map((r) => `${opOf(r)} ${r.fault}`);
  const sent = (op: Op) => proxy.requests.slice(mark).filter((r) => opOf(r) === op).length;
  const start = () => {
    seen = new Map();
    mark = proxy.requests.length;
  };

  beforeAll(async () => {
    s3 = await startS3Server({ buckets: ['out'] });
    copying = await startS3PartCopy(s3);
    proxy = await startS3FaultProxy(copying, {
      fault: (r) => {
        const op = opOf(r);
        if (!op) return undefined;
        const partNumber = r.url.searchParams.get('partNumber');
        const key = `${op}:${partNumber ?? ''}`;
        const tries = (seen.get(key) ?? 0) + 1;
        seen.set(key, tries);
        // s3rver 3.7.1 has no AbortMultipartUpload (405): answered here, as S3 does
        return policy(op, tries, partNumber) ?? (op === 'abort' ? reply(204) : undefined);
      },
    });
    client = createS3({ ...proxy.settings, maxAttempts: 2, retry: { budgetMs: 10_000, attempts: 4, baseMs: 5, maxMs: 50 } });
  });
  afterAll(async () => {
    client?.destroy();
    await proxy?.stop();
    await copying?.stop();
    await s3?.stop();
  });

  const source = async (key: string, bytes: number) => {
    const data = randomBytes(bytes);
    await s3.put('out', key, data);
    return data;
  };

  it('the complete of a multipart copy loses its answer: the copy is done, the destination has the source bytes', async () => {
    const data = await source('staged/a.bin', 5 * MiB + 12345);
    start();
    policy = (op, tries) => (op === 'complete' && tries === 1 ? loseAnswer() : undefined);
    await copyObjectInParts(client, { bucket: 'out', key: 'staged/a.bin' }, { bucket: 'out', key: 'final/a.bin' }, data.length, MiB);
    expect(sha(await s3.get('out', 'final/a.bin'))).toBe(sha(data));
    expect(faults()).toEqual(['complete answer lost']);
    expect(sent('part-copy')).toBe(6);
    expect(sent('complete')).toBeGreaterThan(1); // the retry found the upload gone (s3rver: 500) and the object there
    expect(sent('abort')).toBe(0);
  });

  it('part copies lose their answers: the retries are harmless, the destination has the source bytes', async () => {
    const data = await source('staged/b.bin', 5 * MiB + 777);
    start();
    // part 2 loses both the SDK's tries (maxAttempts 2), so the client's own retry has to carry it; part 5 one
    policy = (op, tries, part) => (op === 'part-copy' && ((part === '2' && tries <= 2) || (part === '5' && tries === 1)) ? loseAnswer() : undefined);
    await copyObjectInParts(client, { bucket: 'out', key: 'staged/b.bin' }, { bucket: 'out', key: 'final/b.bin' }, data.length, MiB);
    expect(sha(await s3.get('out', 'final/b.bin'))).toBe(sha(data));
    expect(faults()).toEqual(['part-copy answer lost', 'part-copy answer lost', 'part-copy answer lost']);
    expect(sent('part-copy')).toBe(9);
    expect(sent('complete')).toBe(1);
  });

  it('the key holds another object of the same size and the complete never goes through: the copy fails', async () => {
    const data = await source('staged/c.bin', 3 * MiB + 5);
    const earlier = randomBytes(data.length);
    await s3.put('out', 'final/c.bin', earlier);
    start();
    policy = (op) => (op === 'complete' ? slowDown() : undefined);
    await expect(
      copyObjectInParts(client, { bucket: 'out', key: 'staged/c.bin' }, { bucket: 'out', key: 'final/c.bin' }, data.length, MiB),
    ).rejects.toMatchObject({ name: 'SlowDown' });
    expect(sha(await s3.get('out', 'final/c.bin'))).toBe(sha(earlier));
    expect(sent('abort')).toBe(1);
  });

  it('the same for the multipart sink: end() fails rather than take the object of the same size for its own', async () => {
    const data = randomBytes(11 * MiB + 3);
    const earlier = randomBytes(data.length);
    await s3.put('out', 'sink/d.bin', earlier);
    start();
    policy = (op) => (op === 'complete' ? slowDown() : undefined);
    const sink = new S3MultipartSink(client, { bucket: 'out', key: 'sink/d.bin' }, { partBytes: 5 * MiB });
    for (let off = 0; off < data.length; off += MiB) await sink.write(data.subarray(off, off + MiB));
    await expect(sink.end()).rejects.toMatchObject({ name: 'SlowDown' });
    await sink.abort();
    expect(sha(await s3.get('out', 'sink/d.bin'))).toBe(sha(earlier));
  });

  it('the multipart sink whose complete loses its answer takes the object these parts made (its ETag, on s3rver the md5)', async () => {
    const data = randomBytes(11 * MiB + 3);
    start();
    policy = (op, tries) => (op === 'complete' && tries === 1 ? loseAnswer() : undefined);
    const sink = new S3MultipartSink(client, { bucket: 'out', key: 'sink/e.bin' }, { partBytes: 5 * MiB });
    for (let off = 0; off < data.length; off += MiB) await sink.write(data.subarray(off, off + MiB));
    await sink.end();
    expect(sink.etag).toBe(`"${createHash('md5').update(data).digest('hex')}"`);
    expect(sha(await s3.get('out', 'sink/e.bin'))).toBe(sha(data));
    expect(faults()).toEqual(['complete answer lost']);
  });
});
