/**
 * The Lloyd driver on the real native engine (CPU backend): resume is bitwise identical, seeds are deterministic,
 * resident rows, cosine, float16 input and abort work end to end.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine, type EngineOptions } from '../../native/index.js';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { openJobEngine } from '../../worker/job-engine.js';
import { decodeCheckpoint, encodeCheckpoint, KmeansAbortedError, runKmeans, type KmeansCheckpoint, type KmeansSpec } from '../../core/kmeans/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-drvn-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const N = 20_000, D = 16, K = 12;
// test/gpu/kmeans-driver-cuda.test.ts runs this file with KMFLEET_TEST_BACKEND=cuda on the GPU machine (the driver
// must behave the same on every backend; on a device engine it starts each next pass before the bookkeeping)
const backend = process.env.KMFLEET_TEST_BACKEND === 'cuda' ? 'cuda' : 'cpu';
let f32: string, f16: string;
beforeAll(async () => {
  f32 = (await generateDataset(join(dir, 'a.npy'), { kind: 'blobs', rows: N, dims: D, centers: K, seed: 2, clusterStd: 4 })).path;
  f16 = (await generateDataset(join(dir, 'h.npy'), { kind: 'blobs', rows: N, dims: D, centers: K, seed: 2, clusterStd: 4, dtype: 'f16' })).path;
});

const spec = (over: Partial<KmeansSpec> = {}): KmeansSpec => ({ k: K, metric: 'l2', init: 'random', maxIter: 60, tol: 0, tolReassign: 0, seed: 4, ...over });
const strip = (h: { ms: number; settledFraction?: number }[]) => h.map(({ ms, settledFraction, ...rest }) => rest);
const bytes = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

async function fit(path: string, s: KmeansSpec, o: { engine?: Partial<EngineOptions>; resume?: KmeansCheckpoint; onCp?: (cp: KmeansCheckpoint) => void; signal?: AbortSignal } = {}) {
  const source = await LocalFileSource.open(path);
  const engine = await Engine.open({ rows: source.rows, dims: source.dims, k: s.k, metric: s.metric, dtype: source.dtype, backend, threads: backend === 'cpu' ? 2 : undefined, chunkRows: 1536, ...o.engine });
  try {
    const result = await runKmeans({ engine, source, spec: s, resume: o.resume, signal: o.signal, onIteration: (_r, cp) => o.onCp?.(cp) });
    return { result, labels: engine.labels(), plan: engine.plan };
  } finally {
    engine.close();
    await source.close();
  }
}

describe(`runKmeans (native engine, ${backend})`, () => {
  it('resumed runs are bitwise identical to an uninterrupted run', async () => {
    for (const s of [spec(), spec({ init: 'kmeans++', seed: 9, tol: 1e-6 })]) {
      const cps: Buffer[] = [];
      const full = await fit(f32, s, { onCp: (cp) => cps.push(encodeCheckpoint(cp)) });
      expect(full.result.iterations).toBeGreaterThanOrEqual(3);
      for (const t of [1, Math.ceil(full.result.iterations / 2), full.result.iterations]) {
        const resumed = await fit(f32, s, { resume: decodeCheckpoint(cps[t - 1]) });
        expect(bytes(resumed.result.centroids).equals(bytes(full.result.centroids))).toBe(true);
        expect(strip(resumed.result.history)).toEqual(strip(full.result.history));
        expect(resumed.result.inertia).toBe(full.result.inertia);
        expect(bytes(resumed.labels).equals(bytes(full.labels))).toBe(true);
      }
    }
  });

  it('is deterministic by seed for random and kmeans++ init', async () => {
    for (const init of ['random', 'kmeans++'] as const) {
      const a = await fit(f32, spec({ init, seed: 1, maxIter: 0 }));
      const b = await fit(f32, spec({ init, seed: 1, maxIter: 0 }));
      const c = await fit(f32, spec({ init, seed: 2, maxIter: 0 }));
      expect(bytes(a.result.centroids).equals(bytes(b.result.centroids))).toBe(true);
      expect(bytes(a.result.centroids).equals(bytes(c.result.centroids))).toBe(false);
    }
  });

  it('gives the same labels with resident rows as fully streamed', async () => {
    const streamed = await fit(f32, spec({ maxIter: 8 }), { engine: { memoryBudget: 0 } });
    const resident = await fit(f32, spec({ maxIter: 8 }), { engine: { memoryBudget: N * D * 4 } });
    expect(resident.plan.residentRows).toBeGreaterThan(0);
    expect(strip(resident.result.history).map((h) => h.reassigned)).toEqual(strip(streamed.result.history).map((h) => h.reassigned));
    expect(bytes(resident.labels).equals(bytes(streamed.labels))).toBe(true);
  });

  it('runs cosine and float16 input to convergence', async () => {
    const cos = await fit(f32, spec({ metric: 'cosine', init: 'kmeans++', tol: 1e-6 }));
    expect(cos.result.converged).toBe(true);
    const h = await fit(f16, spec({ init: 'kmeans++', tol: 1e-6 }));
    expect(h.result.converged).toBe(true);
    expect(h.result.inertia).toBeGreaterThan(0);
  });

  it('abort stops the run at a chunk boundary with the last checkpoint', async () => {
    const ac = new AbortController();
    const err = await fit(f32, spec({ maxIter: 50 }), {
      signal: ac.signal,
      engine: { chunkRows: 256 },
      onCp: (cp) => { if (cp.iteration === 2) setImmediate(() => ac.abort()); },
    }).catch((e) => e);
    expect(err).toBeInstanceOf(KmeansAbortedError);
    expect((err as KmeansAbortedError).checkpoint?.iteration).toBeGreaterThanOrEqual(2);
  });

  // Opens f32's engine with every beginPass recorded (its mode and options), runs `body`, closes both.
  type Recorded = { mode: string; options?: { dataVariance?: boolean } };
  async function withRecordedPasses<T>(s: KmeansSpec, body: (engine: Engine, source: LocalFileSource, passes: Recorded[]) => Promise<T>): Promise<T> {
    const source = await LocalFileSource.open(f32);
    const engine = await Engine.open({ rows: source.rows, dims: source.dims, k: s.k, metric: s.metric, dtype: source.dtype, backend, threads: backend === 'cpu' ? 2 : undefined, chunkRows: 1536 });
    try {
      const passes: Recorded[] = [];
      const beginPass = engine.beginPass.bind(engine);
      engine.beginPass = (mode, o) => {
        passes.push({ mode, options: o });
        return beginPass(mode, o);
      };
      return await body(engine, source, passes);
    } finally {
      engine.close();
      await source.close();
    }
  }

  it('hands the final centroids out before the last assign pass; the result holds the same values as the engine after it', async () => {
    for (const s of [spec({ maxIter: 7 }), spec({ maxIter: 0 })]) {
      await withRecordedPasses(s, async (engine, source, passes) => {
        const handed: { centroids: Float32Array; passesBefore: number }[] = [];
        const result = await runKmeans({ engine, source, spec: s, onFinalCentroids: (c) => handed.push({ centroids: Float32Array.from(c), passesBefore: passes.length }) });
        expect(passes.map((p) => p.mode)).toEqual([...Array<string>(s.maxIter).fill('fit'), 'assign']);
        expect(handed).toHaveLength(1);
        expect(handed[0].passesBefore).toBe(s.maxIter); // every fit pass done, the assign pass not begun
        expect(bytes(handed[0].centroids).equals(bytes(result.centroids))).toBe(true);
        expect(bytes(engine.centroids()).equals(bytes(result.centroids))).toBe(true);
      });
    }
  });

  it('asks the engine for the data variance once a run: the first pass, or none after a resume that carries it', async () => {
    const s = spec({ maxIter: 6 });
    const run = (resume?: KmeansCheckpoint) => withRecordedPasses(s, async (engine, source, passes) => {
      const cps: KmeansCheckpoint[] = [];
      const result = await runKmeans({ engine, source, spec: s, resume, onIteration: (_r, cp) => { cps.push(cp); } });
      return { asked: passes.map((p) => p.options?.dataVariance ?? true), result, cps };
    });
    const whole = await run();
    expect(whole.asked).toEqual([true, ...Array<boolean>(6).fill(false)]);  // 6 fit passes, then the final assign
    expect(Number.isFinite(whole.result.dataVariance) && whole.result.dataVariance > 0).toBe(true);
    for (const cp of whole.cps) expect(Object.is(cp.dataVariance, whole.result.dataVariance)).toBe(true);
    // resumed from iteration 3: the checkpoint's variance is kept, so no pass asks, and the result is the same
    const resumed = await run(decodeCheckpoint(encodeCheckpoint(whole.cps[2])));
    expect(resumed.asked).toEqual(Array<boolean>(1 + 3 + 1).fill(false));  // the labels' assign pass, 3 fit passes, the final one
    expect(Object.is(resumed.result.dataVariance, whole.result.dataVariance)).toBe(true);
    expect(bytes(resumed.result.centroids).equals(bytes(whole.result.centroids))).toBe(true);
  });

  it('a resume on an engine planned anew keeps the checkpoint\'s chunk rows, and so the bits (openJobEngine)', async () => {
    const s = spec({ maxIter: 8 });
    const cps: KmeansCheckpoint[] = [];
    const whole = await fit(f32, s, { engine: { memoryBudget: N * D * 4 }, onCp: (cp) => cps.push(cp) });
    expect(decodeCheckpoint(encodeCheckpoint(cps[2])).sumsPlan).toEqual({ backend, chunkRows: 1536 });
    // the pod that resumes has another budget (every row streamed) and no configured chunk: its planner picks its own
    const source = await LocalFileSource.open(f32);
    // (on the CPU, backend auto: a job sent to the CPU pins nothing)
    const options: EngineOptions = { rows: source.rows, dims: source.dims, k: K, metric: 'l2', dtype: source.dtype, backend: backend === 'cuda' ? 'cuda' : 'auto', threads: backend === 'cpu' ? 2 : undefined, memoryBudget: 0 };
    const planned = await Engine.open(options);
    const automatic = planned.plan.chunkRows;
    planned.close();
    expect(automatic).not.toBe(1536);
    // the CPU's sums do not depend on chunking, so a CPU checkpoint pins nothing: on the CPU, the one a GPU would write
    const cp = decodeCheckpoint(encodeCheckpoint(cps[2]));
    const resume = backend === 'cuda' ? cp : { ...cp, sumsPlan: { backend: 'cuda' as const, chunkRows: 1536 } };
    const lines: string[] = [];
    const log = pino({ level: 'info' }, { write: (line: string) => { lines.push(line); } });
    const engine = await openJobEngine((o) => Engine.open(o), options, resume, log);
    try {
      expect(engine.plan.chunkRows).toBe(1536);
      expect(engine.plan.residentRows).toBe(0);
      const result = await runKmeans({ engine, source, spec: s, resume });
      expect(bytes(result.centroids).equals(bytes(whole.result.centroids))).toBe(true);
      expect(result.inertia).toBe(whole.result.inertia);
      expect(bytes(engine.labels()).equals(bytes(whole.labels))).toBe(true);
    } finally {
      engine.close();
      await source.close();
    }
    const said = lines.map((l) => (JSON.parse(l) as { msg: string }).msg);
    expect(said).toContain(backend === 'cuda' ? 'resume keeps the checkpoint\'s chunk rows' : 'resumed on another backend: the result may differ from an uninterrupted run in the last bits');
  });
});
