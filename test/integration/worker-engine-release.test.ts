/**
 * A finished job's engine is closed after BullMQ recorded the job's end (worker/engine-releases.ts), exactly once, and
 * before the next job's engine opens — on completion, on failure and on SIGTERM (the job handed back, no BullMQ
 * event). Real Redis, s3rver and engine; the engines are the real ones, wrapped to count close() calls.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { Engine, type EngineOptions } from '../../native/index.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { EngineReleases } from '../../worker/engine-releases.js';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import type { KmfleetWorker } from '../../worker/worker.js';
import { startStack, until, type Stack } from './pipeline-fixture.js';

const WORKER_ENV = { KMFLEET_CHUNK_ROWS: '4096', KMFLEET_THREADS: '2' };

interface Tracked {
  engine: Engine;
  buffer: Buffer;
  closes: number;
  /** engines opened before this one and not yet closed at the moment it opened */
  openBeside: number;
}

/** openEngine for startWorker: the real engine, its close() counted */
function trackEngines() {
  const all: Tracked[] = [];
  const openEngine = async (o: EngineOptions) => {
    const openBeside = all.filter((t) => t.closes === 0).length;
    const engine = await Engine.open(o);
    const t: Tracked = { engine, buffer: engine.buffer(0), closes: 0, openBeside };
    const close = engine.close.bind(engine);
    engine.close = () => {
      t.closes++;
      close();
    };
    all.push(t);
    return engine;
  };
  return { all, openEngine };
}

describe('engine release after the job is reported finished', () => {
  let stack: Stack;
  let dir: string;
  let worker: KmfleetWorker | undefined;
  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-release-'));
    const blobs = await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows: 20_000, dims: 8, centers: 6, seed: 3, clusterStd: 2 });
    await stack.s3.put('data', 'blobs.npy', readFileSync(blobs.path));
    const normal = await generateDataset(join(dir, 'normal.npy'), { kind: 'normal', rows: 60_000, dims: 16, seed: 5 });
    await stack.s3.put('data', 'normal.npy', readFileSync(normal.path));
    // a NaN in row 7: k-means++ fails after the engine opened
    const bad = new Float32Array(2_000 * 4).map((_, i) => i % 7);
    bad[7 * 4 + 2] = Number.NaN;
    await stack.s3.put('data', 'nan.npy', encodeNpy(bad, [2_000, 4], '<f4'));
  });
  afterEach(async () => {
    await worker?.shutdown('test end');
    worker = undefined;
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('completed jobs: the engine is still open when BullMQ reports the job, then closed once, before the next opens', async () => {
    const engines = trackEngines();
    worker = await stack.startWorker(WORKER_ENV, { openEngine: engines.openEngine });
    const closedAtReport: number[] = [];
    // runs before the worker's own 'completed' listener, which releases the engine
    worker.worker.prependListener('completed', () => closedAtReport.push(engines.all.at(-1)!.closes));
    const spec = { dataset: { uri: 's3://data/blobs.npy' }, k: 6, maxIter: 5, tol: 0, seed: 1, backend: 'cpu', output: 's3://out/runs' };
    await stack.client.enqueue(spec, { jobId: 'rel-a' });
    await stack.client.enqueue(spec, { jobId: 'rel-b' });
    await stack.client.wait('rel-a', { timeoutMs: 30_000, pollMs: 20 });
    await stack.client.wait('rel-b', { timeoutMs: 30_000, pollMs: 20 });
    await until(async () => engines.all.length === 2 && engines.all.every((t) => t.closes > 0), 5_000, 'both engines closed');
    expect(closedAtReport).toEqual([0, 0]);
    expect(engines.all.map((t) => t.openBeside)).toEqual([0, 0]);
    expect(engines.all.map((t) => t.closes)).toEqual([1, 1]);
    expect(engines.all.every((t) => t.buffer.length === 0)).toBe(true); // close() detaches the engine's Buffers
  });

  it('a job that fails after its engine opened: closed once, after BullMQ recorded the failure', async () => {
    const engines = trackEngines();
    worker = await stack.startWorker(WORKER_ENV, { openEngine: engines.openEngine });
    const closedAtReport: number[] = [];
    worker.worker.prependListener('failed', () => closedAtReport.push(engines.all.at(-1)?.closes ?? -1));
    await stack.client.enqueue({ dataset: { uri: 's3://data/nan.npy' }, k: 3, maxIter: 5, seed: 1, backend: 'cpu', output: 's3://out/runs' }, { jobId: 'rel-nan' });
    const err = await stack.client.wait('rel-nan', { timeoutMs: 30_000, pollMs: 20 }).catch((e: Error) => e);
    expect(String(err)).toMatch(/row 7 has a non-finite value/);
    await until(async () => engines.all[0]?.closes === 1, 5_000, 'engine closed');
    expect(closedAtReport).toEqual([0]);
    await new Promise((r) => setTimeout(r, 50));
    expect(engines.all.map((t) => t.closes)).toEqual([1]);
  });

  it('SIGTERM: the job goes back to the queue with no BullMQ event; shutdown closes its engine once', async () => {
    const engines = trackEngines();
    worker = await stack.startWorker(WORKER_ENV, { openEngine: engines.openEngine });
    await stack.client.enqueue(
      { dataset: { uri: 's3://data/normal.npy' }, k: 32, maxIter: 500, tol: 0, seed: 1, backend: 'cpu', output: 's3://out/runs' },
      { jobId: 'rel-term' },
    );
    await until(async () => ((await stack.client.get('rel-term'))?.progress?.iteration ?? 0) >= 2, 30_000, 'iteration 2');
    await worker.shutdown('SIGTERM');
    worker = undefined;
    expect((await stack.client.get('rel-term'))?.state).toBe('waiting');
    expect(engines.all.map((t) => t.closes)).toEqual([1]);
    expect(engines.all[0].buffer.length).toBe(0);
    await stack.client.cancel('rel-term');
  });
});

describe('EngineReleases', () => {
  it('runs each release once: when reported, before another engine opens, or after the fallback', async () => {
    vi.useFakeTimers();
    try {
      const releases = new EngineReleases({ fallbackMs: 100 });
      const calls: string[] = [];
      releases.defer('a', () => calls.push('a'));
      releases.defer('b', () => calls.push('b'));
      releases.reported('a');
      releases.reported('a');
      expect(calls).toEqual(['a']);
      releases.defer('b', () => calls.push('b again')); // the same job's next attempt: the earlier one goes first
      expect(calls).toEqual(['a', 'b']);
      releases.defer('c', () => calls.push('c'));
      releases.releaseAll();
      expect(calls).toEqual(['a', 'b', 'b again', 'c']);
      expect(releases.size).toBe(0);
      releases.defer('d', () => calls.push('d'));
      vi.advanceTimersByTime(99);
      expect(calls).toHaveLength(4);
      vi.advanceTimersByTime(1);
      expect(calls).toEqual(['a', 'b', 'b again', 'c', 'd']);
      releases.reported('d');
      releases.releaseAll();
      expect(calls).toHaveLength(5);
    } finally {
      vi.useRealTimers();
    }
  });

  it('a release that throws is reported, not thrown into BullMQ\'s event emitter', () => {
    const errors: [unknown, string][] = [];
    const releases = new EngineReleases({ onError: (err, jobId) => errors.push([err, jobId]) });
    releases.defer('x', () => {
      throw new Error('boom');
    });
    expect(() => releases.reported('x')).not.toThrow();
    expect(errors).toHaveLength(1);
    expect(errors[0][1]).toBe('x');
    expect(releases.size).toBe(0);
  });
});
