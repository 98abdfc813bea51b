/**
 * Faults on S3 WRITES (test/integration/pipeline-s3-faults.test.ts and s3-retry.test.ts mostly exercise reads): a proxy
 * in front of s3rver injects 503 SlowDown and connection resets into CreateMultipartUpload, UploadPart,
 * CompleteMultipartUpload and PutObject, and keeps a ledger of multipart uploads (created / completed / aborted by
 * upload id), since s3rver 3.7.1 implements neither ListMultipartUploads nor AbortMultipartUpload (405): the proxy
 * answers AbortMultipartUpload itself (204, as S3 does) and the ledger stands in for ListMultipartUploads.
 *   - the multipart sink survives transient faults on every kind of upload request: object bytes = what was written;
 *   - a part that never goes through: end() fails, the upload is aborted, nothing lingers, no object appears;
 *   - a whole job whose uploads (checkpoints, multipart assignments, centroids, summary) keep hitting faults
 *     completes in one attempt; every output matches the sha256 in summary.json and the reference run; no open upload.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../worker/dataset/synthetic.js';
import { decodeNpy } from '../../worker/formats/npy-encode.js';
import { S3MultipartSink } from '../../worker/outputs/multipart-sink.js';
import { createS3, type S3Handle } from '../../worker/s3/client.js';
import { bytesOf, referenceFit, startStack, type Stack } from '../integration/pipeline-fixture.js';

type Fault = 'slowdown' | 'reset';
type Op = 'create' | 'part' | 'complete' | 'abort' | 'put' | 'other';

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

function opOf(req: IncomingMessage): Op {
  const url = new URL(req.url ?? '/', 'http://x');
  if (req.method === 'POST' && url.searchParams.has('uploads')) return 'create';
  if (req.method === 'PUT' && url.searchParams.has('partNumber')) return 'part';
  if (req.method === 'POST' && url.searchParams.has('uploadId')) return 'complete';
  if (req.method === 'DELETE' && url.searchParams.has('uploadId')) return 'abort';
  if (req.method === 'PUT') return 'put';
  return 'other';
}

describe('faults on S3 uploads', () => {
  let stack: Stack;
  let proxy: Server;
  let client: S3Handle;
  let dir: string;
  /** decides the fault for each upload request; default none */
  let policy: (op: Op, url: URL, n: number) => Fault | undefined = () => undefined;
  const ledger = { created: new Set<string>(), completed: new Set<string>(), aborted: new Set<string>() };
  const faults: string[] = [];
  let n = 0;
  const openUploads = () => [...ledger.created].filter((id) => !ledger.completed.has(id) && !ledger.aborted.has(id));

  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-s3up-'));
    proxy = createServer((req, res) => {
      const op = opOf(req);
      const url = new URL(req.url ?? '/', 'http://x');
      const fault = op === 'other' ? undefined : policy(op, url, ++n);
      if (fault) {
        faults.push(`${op} ${fault}`);
        if (fault === 'reset') {
          req.socket.destroy();
          return;
        }
        req.resume();
        res.writeHead(503, { 'content-type': 'application/xml' });
        res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>');
        return;
      }
      if (op === 'abort') {
        req.resume();
        ledger.aborted.add(url.searchParams.get('uploadId')!);
        res.writeHead(204);
        res.end();
        return;
      }
      const up = request({ host: '127.0.0.1', port: stack.s3.port, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
        const chunks: Buffer[] = [];
        upRes.on('data', (c: Buffer) => chunks.push(c));
        upRes.on('end', () => {
          const body = Buffer.concat(chunks);
          const ok = (upRes.statusCode ?? 500) < 300;
          if (ok && op === 'create') {
            const id = /<UploadId>([^<]+)<\/UploadId>/.exec(body.toString())?.[1];
            if (id) ledger.created.add(id);
          }
          if (ok && op === 'complete') ledger.completed.add(url.searchParams.get('uploadId')!);
          res.writeHead(upRes.statusCode!, upRes.headers);
          res.end(body);
        });
      });
      up.on('error', () => req.socket.destroy());
      req.pipe(up);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const port = (proxy.address() as { port: number }).port;
    client = createS3({ ...stack.s3.settings, endpoint: `http://127.0.0.1:${port}`, maxAttempts: 5, retry: { attempts: 5, baseMs: 5, maxMs: 50 } });
  });
  afterAll(async () => {
    client?.destroy();
    await stack?.stop();
    proxy?.closeAllConnections();
    await new Promise((r) => proxy?.close(r));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('multipart upload through 503s and resets on create, parts and complete: the object is exact', async () => {
    const seen = new Map<string, number>();
    // the first try of every request of each kind and part number fails; every other kind alternates 503 / reset
    policy = (op, url) => {
      const key = `${op}:${url.searchParams.get('partNumber') ?? ''}`;
      const tries = (seen.get(key) ?? 0) + 1;
      seen.set(key, tries);
      return tries === 1 ? (op === 'part' && url.searchParams.get('partNumber') === '2' ? 'reset' : 'slowdown') : undefined;
    };
    const data = Buffer.alloc(13 * 1024 * 1024 + 12344);
    for (let i = 0; i < data.length; i += 4) data.writeUInt32LE((i * 2654435761) >>> 0, i);
    const sink = new S3MultipartSink(client, { bucket: 'out', key: 'mp/ok.bin' }, { partBytes: 5 * 1024 * 1024, concurrency: 2 });
    for (let off = 0; off < data.length; off += 1 << 20) await sink.write(data.subarray(off, off + (1 << 20)));
    await sink.end();
    expect(sha(await stack.s3.get('out', 'mp/ok.bin'))).toBe(sha(data));
    expect(faults.filter((f) => f.startsWith('part')).length).toBe(3);
    expect(faults).toContain('create slowdown');
    expect(faults).toContain('complete slowdown');
    expect(faults).toContain('part reset');
    expect(openUploads()).toEqual([]);
    expect(ledger.completed.size).toBe(1);
  });

  it('a part that never goes through: end() fails, the upload is aborted, no open upload, no object', async () => {
    policy = (op, url) => (op === 'part' && url.searchParams.get('partNumber') === '2' ? 'slowdown' : undefined);
    const quick = createS3({ ...stack.s3.settings, endpoint: client.settings.endpoint, maxAttempts: 2 }); // fewer SDK backoffs
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
    // every 2nd upload request fails, alternately 503 and reset: checkpoints, multipart assignments, centroids, summary
    policy = (op, _url, i) => (op === 'other' || op === 'abort' || i % 2 === 1 ? undefined : i % 4 === 0 ? 'slowdown' : 'reset');
    faults.length = 0;
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
      expect(faults.some((f) => f.startsWith('part'))).toBe(true);
      expect(faults.some((f) => f.startsWith('put'))).toBe(true);
      expect(openUploads()).toEqual([]);
    } finally {
      await worker.shutdown('test end');
    }
  });

  it('a job whose assignments upload never completes: it fails after its attempts, every upload aborted, no visible output', async () => {
    const failing = createS3({ ...stack.s3.settings, endpoint: client.settings.endpoint, maxAttempts: 2, retry: { attempts: 2, baseMs: 5, maxMs: 20 } });
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
