/**
 * Faults on S3 WRITES (test/integration/pipeline-s3-faults.test.ts and s3-retry.test.ts mostly exercise reads): a proxy
 * in front of s3rver injects 503 SlowDown and connection resets into CreateMultipartUpload, UploadPart,
 * CompleteMultipartUpload and PutObject, and keeps a ledger of multipart uploads (created / completed / aborted by
 * upload id), since s3rver 3.7.1 implements neither ListMultipartUploads nor AbortMultipartUpload (405): the proxy
 * answers AbortMultipartUpload itself (204, as S3 does) and the ledger stands in for ListMultipartUploads.
 * (The proxy is test/helpers/s3-fault-proxy.ts.)
 *   - the multipart sink survives transient faults on every kind of upload request: object bytes = what was written;
 *   - a part that never goes through: end() fails, the upload is aborted, nothing lingers, no object appears;
 *   - answers lost after S3 did the work (create, part, complete, put): retries are harmless, the objects exact; a
 *     complete's retry that finds the upload gone (NoSuchUpload on S3, a 500 on s3rver) takes the whole object as done;
 *   - a whole job whose uploads (checkpoints, multipart assignments, centroids, summary) keep hitting faults, lost
 *     answers among them, completes in one attempt; every output matches the sha256 in summary.json and the reference
 *     run; no open upload the worker knew of.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { S3MultipartSink } from '../../worker/outputs/multipart-sink.js';
import { createS3, type S3Handle } from '../../worker/s3/client.js';
import { loseAnswer, reply, reset, slowDown, startS3FaultProxy, type ProxiedRequest, type S3FaultProxy, type S3Operation } from '../helpers/s3-fault-proxy.js';
import { bytesOf, referenceFit, startStack, type Stack } from '../integration/pipeline-fixture.js';

type Fault = 'slowdown' | 'reset' | 'lost';
type Op = 'create' | 'part' | 'complete' | 'abort' | 'put';

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/** The upload requests, by short name; other requests are never faulted. */
const OPS: Partial<Record<S3Operation, Op>> = {
  CreateMultipartUpload: 'create',
  UploadPart: 'part',
  CompleteMultipartUpload: 'complete',
  AbortMultipartUpload: 'abort',
  PutObject: 'put',
};

/** Counts the tries of each request kind and part number: the how-many-th try this one is. */
function tryCounter(): (op: Op, url: URL) => number {
  const seen = new Map<string, number>();
  return (op, url) => {
    const key = `${op}:${url.searchParams.get('partNumber') ?? ''}`;
    const tries = (seen.get(key) ?? 0) + 1;
    seen.set(key, tries);
    return tries;
  };
}

describe('faults on S3 uploads', () => {
  let stack: Stack;
  let proxy: S3FaultProxy;
  let client: S3Handle;
  let dir: string;
  /** decides the fault for each upload request (n: its number among upload requests); default none */
  let policy: (op: Op, url: URL, n: number) => Fault | undefined = () => undefined;
  const ledger = { created: new Set<string>(), completed: new Set<string>(), aborted: new Set<string>(), createAnswerLost: new Set<string>() };
  /** "op fault" of the faults injected since `mark` */
  let mark = 0;
  const faults = () => proxy.requests.slice(mark).filter((r) => r.fault && !r.fault.startsWith('reply') && OPS[r.operation]).map((r) => `${OPS[r.operation]} ${r.fault}`);
  let n = 0;
  const left = (id: string) => !ledger.completed.has(id) && !ledger.aborted.has(id);
  /** uploads left open whose ids the client had (an upload whose creation answer was lost is not one: it never knew it) */
  const openUploads = () => [...ledger.created].filter((id) => left(id) && !ledger.createAnswerLost.has(id));

  const faultOf = (r: ProxiedRequest) => {
    const op = OPS[r.operation];
    if (!op) return undefined;
    const fault = policy(op, r.url, ++n);
    if (fault) return fault === 'reset' ? reset() : fault === 'lost' ? loseAnswer() : slowDown();
    if (op === 'abort') {
      ledger.aborted.add(r.url.searchParams.get('uploadId')!);
      return reply(204);
    }
    return undefined;
  };
  const record = (r: ProxiedRequest, status: number, body: Buffer) => {
    if (status >= 300) return;
    if (r.operation === 'CreateMultipartUpload') {
      const id = /<UploadId>([^<]+)<\/UploadId>/.exec(body.toString())?.[1];
      if (id) ledger.created.add(id);
      if (id && r.fault === 'answer lost') ledger.createAnswerLost.add(id);
    }
    if (r.operation === 'CompleteMultipartUpload') ledger.completed.add(r.url.searchParams.get('uploadId')!);
  };

  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-s3up-'));
    proxy = await startS3FaultProxy(stack.s3, { fault: faultOf, onResponse: record });
    client = createS3({ ...proxy.settings, maxAttempts: 5, retry: { budgetMs: 10_000, attempts: 5, baseMs: 5, maxMs: 50 } });
  });
  afterAll(async () => {
    client?.destroy();
    await stack?.stop();
    await proxy?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('multipart upload through 503s and resets on create, parts and complete: the object is exact', async () => {
    const tryOf = tryCounter();
    // the first try of every request of each kind and part number fails; every other kind alternates 503 / reset
    policy = (op, url) => {
      const tries = tryOf(op, url);
      return tries === 1 ? (op === 'part' && url.searchParams.get('partNumber') === '2' ? 'reset' : 'slowdown') : undefined;
    };
    const data = Buffer.alloc(13 * 1024 * 1024 + 12344);
    for (let i = 0; i < data.length; i += 4) data.writeUInt32LE((i * 2654435761) >>> 0, i);
    const sink = new S3MultipartSink(client, { bucket: 'out', key: 'mp/ok.bin' }, { partBytes: 5 * 1024 * 1024, concurrency: 2 });
    for (let off = 0; off < data.length; off += 1 << 20) await sink.write(data.subarray(off, off + (1 << 20)));
    await sink.end();
    expect(sha(await stack.s3.get('out', 'mp/ok.bin'))).toBe(sha(data));
    expect(faults().filter((f) => f.startsWith('part')).length).toBe(3);
    expect(faults()).toContain('create SlowDown');
    expect(faults()).toContain('complete SlowDown');
    expect(faults()).toContain('part reset');
    expect(openUploads()).toEqual([]);
    expect(ledger.completed.size).toBe(1);
  });

  it('answers lost after S3 did the work (create, a part, complete, a put): the objects are exact, retries are harmless', async () => {
    const tryOf = tryCounter();
    // the first try of each of these is carried out by s3rver, and its answer never reaches the client
    policy = (op, url) => {
      const tries = tryOf(op, url);
      const lose = op === 'create' || op === 'complete' || op === 'put' || (op === 'part' && url.searchParams.get('partNumber') === '2');
      return tries === 1 && lose ? 'lost' : undefined;
    };
    mark = proxy.requests.length;
    const data = Buffer.alloc(11 * 1024 * 1024 + 4320);
    for (let i = 0; i < data.length; i += 4) data.writeUInt32LE((i * 2246822519) >>> 0, i);
    const sink = new S3MultipartSink(client, { bucket: 'out', key: 'mp/lost.bin' }, { partBytes: 5 * 1024 * 1024, concurrency: 2 });
    for (let off = 0; off < data.length; off += 1 << 20) await sink.write(data.subarray(off, off + (1 << 20)));
    await sink.end();
    expect(sha(await stack.s3.get('out', 'mp/lost.bin'))).toBe(sha(data));
    const small = new S3MultipartSink(client, { bucket: 'out', key: 'mp/lost-small.bin' }, { partBytes: 5 * 1024 * 1024 });
    await small.write(data.subarray(0, 1000));
    await small.end();
    expect(sha(await stack.s3.get('out', 'mp/lost-small.bin'))).toBe(sha(data.subarray(0, 1000)));
    expect(faults().sort()).toEqual(['complete answer lost', 'create answer lost', 'part answer lost', 'put answer lost']);
    // the complete's retries find the upload gone and the object whole: done. The upload whose creation answer was
    // lost stays open, for the bucket's lifecycle rule (docs/operations.md)
    expect(openUploads()).toEqual([]);
    expect([...ledger.createAnswerLost].filter(left)).toHaveLength(1);
  });

  it('a part that never goes through: end() fails, the upload is aborted, no open upload, no object', async () => {
    policy = (op, url) => (op === 'part' && url.searchParams.get('partNumber') === '2' ? 'slowdown' : undefined);
    const quick = createS3({ ...proxy.settings, maxAttempts: 2 }); // fewer SDK backoffs
    const sink = new S3MultipartSink(quick, { bucket: 'out', key: 'mp/broken.bin' }, { partBytes: 5 * 1024 * 1024 });
    const data = Buffer.alloc(11 * 1024 * 1024, 7);
    let err: unknown;
    try {
      for (let off = 0; off < data.length; off += 1 << 20) await sink.write(data.subarray(off, off + (1 << 20)));
      await sink.end();
    } catch (e) {
      err = e;
      await sink.abort();
    }
    expect(err).toBeDefined();
    expect(sink.abortError).toBeUndefined();
    expect(openUploads()).toEqual([]);
    expect(ledger.aborted.size).toBe(1);
    expect(stack.s3.keys('out', 'mp/broken')).toEqual([]);
    quick.destroy();
  });

  it('a job whose uploads keep hitting faults completes once; outputs match summary.json checksums and the reference', async () => {
    // every 2nd upload request fails, in turn a 503, a reset, and an answer lost after S3 did the work: checkpoints,
    // multipart assignments, centroids, summary; and the first complete of the assignments' upload loses its answer
    let completes = 0;
    policy = (op, _url, i) => {
      if (op === 'complete' && completes++ === 0) return 'lost';
      return op === 'abort' || i % 2 === 1 ? undefined : (['slowdown', 'reset', 'lost'] as const)[(i / 2) % 3];
    };
    mark = proxy.requests.length;
    const path = (await generateDataset(join(dir, 'big.npy'), { kind: 'blobs', rows: 1_600_000, dims: 2, centers: 4, seed: 5, clusterStd: 1 })).path;
    await stack.s3.put('data', 'big.npy', readFileSync(path));
    const spec = { k: 4, maxIter: 3, tol: 0, seed: 2 };
    const worker = await stack.startWorker({ KMFLEET_CHUNK_ROWS: '262144', KMFLEET_THREADS: '1', KMFLEET_S3_UPLOAD_PART_MB: '5' }, { s3: client });
    try {
      await stack.client.enqueue({ dataset: { uri: 's3://data/big.npy' }, ...spec, backend: 'cpu', output: 's3://out/up' }, { jobId: 'up-1' });
      const result = await stack.client.wait('up-1', { timeoutMs: 60_000 });
      expect(result.iterations).toBe(spec.maxIter);
      expect((await stack.client.get('up-1'))?.attemptsMade).toBe(1);
      const summary = JSON.parse((await stack.s3.get('out', 'up/up-1/summary.json')).toString()) as { checksums: Record<string, string> };
      const files = ['centroids.npy', 'assignments.npy'];
      for (const f of files) expect(`sha256:${sha(await stack.s3.get('out', `up/up-1/${f}`))}`, f).toBe(summary.checksums[f]);
      const ref = await referenceFit(path, spec, { chunkRows: 262144, threads: 1 });
      expect(bytesOf(decodeNpy(await stack.s3.get('out', 'up/up-1/centroids.npy')).data).equals(bytesOf(ref.centroids))).toBe(true);
      expect(bytesOf(decodeNpy(await stack.s3.get('out', 'up/up-1/assignments.npy')).data).equals(bytesOf(ref.labels))).toBe(true);
      expect(stack.s3.keys('out', 'up/up-1/')).toEqual(['up/up-1/assignments.npy', 'up/up-1/centroids.npy', 'up/up-1/summary.json']);
      // the assignments (6.4 MB) went up as a multipart upload, through faults; none is left open
      expect(faults().some((f) => f.startsWith('part'))).toBe(true);
      expect(faults().some((f) => f.startsWith('put'))).toBe(true);
      expect(faults()).toContain('complete answer lost');
      expect(openUploads()).toEqual([]);
    } finally {
      await worker.shutdown('test end');
    }
  });

  it('a job whose assignments upload never completes: it fails after its attempts, every upload aborted, no visible output', async () => {
    const failing = createS3({ ...proxy.settings, maxAttempts: 2, retry: { budgetMs: 10_000, attempts: 2, baseMs: 5, maxMs: 20 } });
    // part 2 of every multipart upload (only the assignments are that big) always answers 503
    policy = (op, url) => (op === 'part' && url.searchParams.get('partNumber') === '2' ? 'slowdown' : undefined);
    const before = new Set(ledger.created);
    const worker = await stack.startWorker({ KMFLEET_CHUNK_ROWS: '262144', KMFLEET_THREADS: '1', KMFLEET_S3_UPLOAD_PART_MB: '5' }, { s3: failing });
    try {
      await stack.client.enqueue({ dataset: { uri: 's3://data/big.npy' }, k: 4, maxIter: 2, tol: 0, seed: 3, backend: 'cpu', output: 's3://out/up' }, { jobId: 'up-2' });
      await expect(stack.client.wait('up-2', { timeoutMs: 60_000 })).rejects.toThrow();
      const info = await stack.client.get('up-2');
      expect(info?.state).toBe('failed');
      expect(info?.attemptsMade).toBe(3); // a 503 is transient: BullMQ retried it, as configured
      const mine = [...ledger.created].filter((id) => !before.has(id));
      expect(mine.length).toBe(3); // one assignments upload per attempt
      expect(openUploads()).toEqual([]);
      expect(stack.s3.keys('out', 'up/up-2/').filter((k) => !k.includes('/_checkpoints/'))).toEqual([]);
    } finally {
      await worker.shutdown('test end');
      failing.destroy();
    }
  });
});
