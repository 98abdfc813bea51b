#!/usr/bin/env node
/**
 * The dataset's download alone: how long the worker's memory cache takes to pull the pipeline bench's dataset
 * (1M × 32 f32 blobs, 128 MB) from a local s3rver, with nothing else running. It is the part of a cold job that
 * k-means++ waits for (its uniform sample needs every block), so it bounds how close a cold job can come to
 * `kmfleet fit` on a page-cached file. Prints, per run, the open (the header's ranged GET) and the download ms.
 *
 *   npm run build:ts && node bench/pipeline/download.mjs [--s3-processes 1] [--concurrency 8] [--block-mb 16] [--runs 6]
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startS3rverProcesses } from './s3rver-processes.mjs';

const ROOT = new URL('../..', import.meta.url).pathname;
const dist = (p) => join(ROOT, 'dist', p);
const { values: a } = parseArgs({
  options: {
    rows: { type: 'string', default: '1000000' },
    dims: { type: 'string', default: '32' },
    's3-processes': { type: 'string', default: '1' },
    concurrency: { type: 'string', default: '8' },
    'block-mb': { type: 'string', default: '16' },
    runs: { type: 'string', default: '6' },
  },
});
const { generateDataset } = await import(dist('core/dataset/synthetic.js'));
const { createS3 } = await import(dist('worker/s3/client.js'));
const { S3MultipartSink } = await import(dist('worker/outputs/multipart-sink.js'));
const { S3RowSource } = await import(dist('worker/dataset/s3-source.js'));
const { MemoryCachedRowSource } = await import(dist('worker/dataset/memory-cache.js'));

const processes = Number(a['s3-processes']), concurrency = Number(a.concurrency), blockBytes = Number(a['block-mb']) << 20;
const dir = mkdtempSync(join(tmpdir(), 'kmfleet-download-'));
try {
  const path = join(dir, 'blobs.npy');
  await generateDataset(path, { kind: 'blobs', rows: Number(a.rows), dims: Number(a.dims), centers: 100, seed: 1, clusterStd: 4 });
  const server = await startS3rverProcesses(join(dir, 's3'), { processes });
  const s3 = createS3({ endpoint: server.url, compat: 's3rver', credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } });
  try {
    const sink = new S3MultipartSink(s3, { bucket: 'bench', key: 'blobs.npy' });
    const data = readFileSync(path);
    for (let off = 0; off < data.length; off += 8 << 20) await sink.write(data.subarray(off, off + (8 << 20)));
    await sink.end();
    const runs = [];
    for (let r = 0; r < Number(a.runs); r++) {
      const t0 = performance.now();
      const source = await S3RowSource.open(s3, 's3://bench/blobs.npy', { format: 'npy', partBytes: blockBytes, concurrency });
      const t1 = performance.now();
      const memory = new MemoryCachedRowSource(source, { blockBytes, concurrency });
      memory.prefetch();
      await memory.view(0, source.rows);
      const t2 = performance.now();
      await memory.close();
      runs.push({ openMs: Math.round(t1 - t0), downloadMs: Math.round(t2 - t1) });
    }
    const mbps = (data.length / 1e6) / (Math.min(...runs.map((r) => r.downloadMs)) / 1000);
    console.log(JSON.stringify({ bytes: data.length, s3Processes: processes, concurrency, blockBytes, bestMBps: Math.round(mbps), runs }));
  } finally {
    s3.destroy();
    await server.stop();
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
