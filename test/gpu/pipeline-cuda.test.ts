/**
 * The pipeline end to end on the GPU machine: a real redis-server and s3rver, the SDK, a worker — the same job run
 * once on the CUDA backend and once on the CPU backend (fp32, exact on both). The outputs must agree: the same labels
 * (the blobs leave no ties) and centroids within 1e-6 relative — the two backends sum in different orders, so bitwise
 * equality is not promised across backends, only within one.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gpuInfo } from '../../native/index.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { startStack, type Stack } from '../integration/pipeline-fixture.js';

describe('pipeline on the GPU: SDK → queue → worker (cuda) → S3', () => {
  let stack: Stack;
  let dir: string;
  const rows = 200_000, dims = 32, k = 20;

  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-gpu-pipeline-'));
    const { path } = await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows, dims, centers: k, seed: 21, clusterStd: 1 });
    await stack.s3.put('data', 'blobs.npy', readFileSync(path));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('completes on the CUDA backend with the outputs of the CPU backend (fp32)', async () => {
    const worker = await stack.startWorker({ KMFLEET_CHUNK_ROWS: '65536' });
    try {
      const spec = { dataset: { uri: 's3://data/blobs.npy' }, k, maxIter: 30, seed: 5, precision: 'fp32' as const };
      await stack.client.enqueue({ ...spec, backend: 'cuda', output: 's3://out/gpu/' }, { jobId: 'on-cuda' });
      await stack.client.enqueue({ ...spec, backend: 'cpu', output: 's3://out/cpu/' }, { jobId: 'on-cpu' });
      const onCuda = await stack.client.wait('on-cuda', { timeoutMs: 120_000 });
      const onCpu = await stack.client.wait('on-cpu', { timeoutMs: 120_000 });

      const summaryOf = async (prefix: string, id: string) =>
        JSON.parse((await stack.s3.get('out', `${prefix}/${id}/summary.json`)).toString('utf8'));
      const cudaSummary = await summaryOf('gpu', 'on-cuda');
      const cpuSummary = await summaryOf('cpu', 'on-cpu');
      expect(cudaSummary.backend).toBe('cuda');
      expect(cpuSummary.backend).toBe('cpu');
      expect(cudaSummary.precision).toBe('fp32');
      expect(onCuda.iterations).toBe(onCpu.iterations);

      const labels = (prefix: string, id: string) => stack.s3.get('out', `${prefix}/${id}/assignments.npy`).then((b) => decodeNpy(b).data as Int32Array);
      const [lc, lp] = [await labels('gpu', 'on-cuda'), await labels('cpu', 'on-cpu')];
      expect(lc.length).toBe(rows);
      let differ = 0;
      for (let i = 0; i < rows; i++) if (lc[i] !== lp[i]) differ++;
      expect(differ).toBe(0);

      const centroids = (prefix: string, id: string) => stack.s3.get('out', `${prefix}/${id}/centroids.npy`).then((b) => decodeNpy(b).data as Float32Array);
      const [cc, cp] = [await centroids('gpu', 'on-cuda'), await centroids('cpu', 'on-cpu')];
      for (let c = 0; c < k; c++) {
        let diff = 0, norm = 0;
        for (let d = 0; d < dims; d++) {
          diff += (cc[c * dims + d] - cp[c * dims + d]) ** 2;
          norm += cp[c * dims + d] ** 2;
        }
        expect(Math.sqrt(diff), `centroid ${c}`).toBeLessThanOrEqual(1e-6 * Math.sqrt(norm));
      }
      expect(Math.abs(onCuda.inertia / onCpu.inertia - 1)).toBeLessThan(1e-6);

      // /metrics: the CUDA device with its compute capability, and the device memory in use while the job ran
      const text = await worker.metrics.registry.metrics();
      expect(text).toMatch(/kmfleet_device_info\{[^}]*backend="cuda"[^}]*compute_capability="\d+\.\d+"/);
      const used = /kmfleet_device_memory_used_bytes\{[^}]*\} (\d+(?:\.\d+)?(?:e\+\d+)?)/.exec(text);
      expect(used, text).not.toBeNull();
      expect(Number(used![1])).toBeGreaterThan(0);
    } finally {
      await worker.shutdown('test end');
    }
  });
  // A pod with several GPUs runs one job per GPU at once (worker/device-pool.ts; concurrency defaults to the GPU
  // count): both jobs overlap, each on its own device, and the same spec gives the same bits on each.
  it.skipIf(gpuInfo().devices.length < 2)('a worker with two GPUs runs a job on each at once, with the same bits', async () => {
    const lines: { msg?: string; jobId?: string; gpus?: number[] }[] = [];
    const sink = new Writable({ write(chunk, _enc, done) { for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l)); done(); } });
    const spec = { dataset: { uri: 's3://data/blobs.npy' }, k, maxIter: 30, seed: 9, precision: 'fp32' as const, backend: 'cuda' as const };
    await stack.client.enqueue({ ...spec, output: 's3://out/two/a/' }, { jobId: 'two-a' });
    await stack.client.enqueue({ ...spec, output: 's3://out/two/b/' }, { jobId: 'two-b' });
    const worker = await stack.startWorker({ KMFLEET_CHUNK_ROWS: '65536' }, { logger: pino({ level: 'info' }, sink) });
    try {
      const [a, b] = await Promise.all(['two-a', 'two-b'].map((id) => stack.client.wait(id, { timeoutMs: 120_000 })));
      expect(a.iterations).toBe(b.iterations);
      const opened = lines.filter((l) => l.msg === 'engine open');
      expect(opened.map((l) => l.jobId).sort()).toEqual(['two-a', 'two-b']);
      expect(opened.map((l) => l.gpus?.length), JSON.stringify(opened)).toEqual([1, 1]);
      expect(new Set(opened.map((l) => l.gpus![0])).size, JSON.stringify(opened.map((l) => l.gpus))).toBe(2);
      const centroids = (p: string) => stack.s3.get('out', `two/${p}/centroids.npy`);
      expect((await centroids('a/two-a')).equals(await centroids('b/two-b'))).toBe(true);
    } finally {
      await worker.shutdown('test end');
    }
  });

  // One job across both GPUs (spec.gpus): the bits of the same job on one GPU.
  it.skipIf(gpuInfo().devices.length < 2)('a job across two GPUs gives the bits of the same job on one', async () => {
    const lines: { msg?: string; jobId?: string; gpus?: number[] }[] = [];
    const sink = new Writable({ write(chunk, _enc, done) { for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l)); done(); } });
    const spec = { dataset: { uri: 's3://data/blobs.npy' }, k, maxIter: 30, seed: 9, precision: 'fp32' as const, backend: 'cuda' as const };
    const worker = await stack.startWorker({}, { logger: pino({ level: 'info' }, sink) });
    try {
      await stack.client.enqueue({ ...spec, gpus: 2, output: 's3://out/split/two/' }, { jobId: 'split-two' });
      const two = await stack.client.wait('split-two', { timeoutMs: 120_000 });
      await stack.client.enqueue({ ...spec, gpus: 1, output: 's3://out/split/one/' }, { jobId: 'split-one' });
      const one = await stack.client.wait('split-one', { timeoutMs: 120_000 });
      const opened = Object.fromEntries(lines.filter((l) => l.msg === 'engine open').map((l) => [l.jobId, l.gpus]));
      expect(opened['split-two']).toHaveLength(2);
      expect(opened['split-one']).toHaveLength(1);
      expect(two.iterations).toBe(one.iterations);
      expect(two.inertia).toBe(one.inertia);
      const file = (p: string, f: string) => stack.s3.get('out', `split/${p}/${f}`);
      for (const f of ['centroids.npy', 'assignments.npy'])
        expect((await file('two/split-two', f)).equals(await file('one/split-one', f)), f).toBe(true);
    } finally {
      await worker.shutdown('test end');
    }
  });
});
