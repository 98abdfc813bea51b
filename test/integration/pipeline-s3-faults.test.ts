/**
 * A job whose S3 answers 503 SlowDown, resets connections and cuts bodies short along the way still completes, with
 * the same bytes as on a healthy S3: every read, checkpoint and upload is retried (SDK retries before the answer, ours
 * for bodies cut mid-stream).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../worker/dataset/synthetic.js';
import { decodeNpy } from '../../worker/formats/npy-encode.js';
import { createS3 } from '../../worker/s3/client.js';
import { bytesOf, referenceFit, startStack, type Stack } from './pipeline-fixture.js';

describe('pipeline through a faulty S3', () => {
  let stack: Stack;
  let proxy: Server;
  let dir: string;
  let path: string;
  const counts = { requests: 0, faults: 0 };

  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-s3faults-'));
    path = (await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows: 60_000, dims: 16, centers: 10, seed: 2, clusterStd: 3 })).path;
    await stack.s3.put('data', 'blobs.npy', readFileSync(path));
    // every 3rd request fails in turn: 503 SlowDown, a reset before the answer, a GET body cut after 1000 bytes
    proxy = createServer((req, res) => {
      const n = ++counts.requests;
      const fault = n % 3 === 0 ? (['slowdown', 'reset', 'truncate'] as const)[(n / 3) % 3] : undefined;
      if (fault === 'slowdown') {
        counts.faults++;
        res.writeHead(503, { 'content-type': 'application/xml' });
        res.end('<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>');
        req.resume();
        return;
      }
      if (fault === 'reset') {
        counts.faults++;
        req.socket.destroy();
        return;
      }
      const up = request({ host: '127.0.0.1', port: stack.s3.port, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
        res.writeHead(upRes.statusCode!, upRes.headers);
        if (fault === 'truncate' && req.method === 'GET' && Number(upRes.headers['content-length'] ?? 0) > 1000) {
          counts.faults++;
          upRes.once('data', (chunk: Buffer) => {
            res.write(chunk.subarray(0, 1000));
            setTimeout(() => res.socket?.destroy(), 5);
          });
        } else upRes.pipe(res);
      });
      req.pipe(up);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  });
  afterAll(async () => {
    await stack?.stop();
    proxy?.closeAllConnections();
    await new Promise((r) => proxy?.close(r));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('completes with the same outputs as on a healthy S3', async () => {
    const port = (proxy.address() as { port: number }).port;
    const faulty = createS3({ ...stack.s3.settings, endpoint: `http://127.0.0.1:${port}`, maxAttempts: 6, retry: { attempts: 6, baseMs: 5, maxMs: 50 } });
    try {
      // small read parts: many GETs, so that every kind of fault hits reads too
      await stack.startWorker({ KMFLEET_CHUNK_ROWS: '4096', KMFLEET_THREADS: '2', KMFLEET_S3_READ_PART_MB: '1' }, { s3: faulty });
      const spec = { k: 10, maxIter: 15, seed: 5 };
      await stack.client.enqueue({ dataset: { uri: 's3://data/blobs.npy' }, ...spec, backend: 'cpu', output: 's3://out/faulty' }, { jobId: 'faulty-1' });
      const result = await stack.client.wait('faulty-1', { timeoutMs: 60_000 });
      expect((await stack.client.get('faulty-1'))?.attemptsMade).toBe(1);
      const ref = await referenceFit(path, spec, { chunkRows: 4096, threads: 2 });
      expect(bytesOf(decodeNpy(await stack.s3.get('out', 'faulty/faulty-1/centroids.npy')).data).equals(bytesOf(ref.centroids))).toBe(true);
      expect(bytesOf(decodeNpy(await stack.s3.get('out', 'faulty/faulty-1/assignments.npy')).data).equals(bytesOf(ref.labels))).toBe(true);
      expect(result.iterations).toBe(ref.iterations);
      expect(counts.faults).toBeGreaterThanOrEqual(4);
    } finally {
      faulty.destroy();
    }
  });
});
