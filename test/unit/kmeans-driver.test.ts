/**
 * The Lloyd driver against a contract-checking engine written here in TypeScript (float64): it implements the engine
 * contract of native/index.ts literally and fails the pass when the driver breaks it (rows out of order or twice,
 * resident rows re-fed, more than plan.buffers feeds in flight, a buffer rewritten before its feed resolved).
 * kmeans-driver-native.test.ts runs the same driver on the real engine.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CancelledError, type EnginePlan, type PassMode, type PassResult } from '../../native/index.js';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import type { RowSource } from '../../core/dataset/row-source.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy, encodeNpy, NpyWriter } from '../../core/formats/index.js';
import {
  decodeCheckpoint,
  encodeCheckpoint,
  gatherRows,
  KmeansAbortedError,
  kmeansPlusPlusSampleSize,
  KmeansSpecError,
  readInitRows,
  Rng,
  runKmeans,
  writeLabels,
  type KmeansCheckpoint,
  type KmeansEngine,
  type KmeansSpec,
} from '../../core/kmeans/index.js';

interface EngineShape { chunkRows?: number; buffers?: number; residentRows?: number; backend?: 'cpu' | 'cuda' }

class ContractEngine implements KmeansEngine {
  readonly plan: EnginePlan;
  readonly options: KmeansEngine['options'];
  private readonly bufs: Buffer[];
  private c: Float64Array;
  private labelsNow: Int32Array;
  private prevLabels: Int32Array | undefined;
  private dist: Float64Array;
  private data: Float64Array; // rows as seen so far this pass (test datasets are small)
  private resident: Float64Array | undefined;
  private mode: PassMode | undefined;
  private nextRow = 0;
  private inFlight = 0;
  private busy = new Set<number>();
  private violation: string | undefined;
  private cancelled = false;
  private finishing = false; // finishPass called, its promise not yet settled
  passes = 0;
  begun = 0; // passes begun
  lastSample: Float64Array | undefined;

  constructor(rows: number, dims: number, k: number, opts: EngineShape = {}) {
    this.options = { rows, dims, k, metric: 'l2', dtype: 'f32' };
    const chunkRows = opts.chunkRows ?? 256;
    // backend 'cuda': the driver treats the engine as working beside the JS thread (it starts passes ahead)
    this.plan = { backend: opts.backend ?? 'cpu', device: 'contract engine (ts)', precision: 'fp32', chunkRows, buffers: opts.buffers ?? 3, residentRows: opts.residentRows ?? 0, hostRows: 0, rowBytes: dims * 4, storedRowBytes: dims * 4, keptDtype: 'f32' };
    this.bufs = Array.from({ length: this.plan.buffers }, () => Buffer.alloc(chunkRows * dims * 4));
    this.c = new Float64Array(k * dims);
    this.labelsNow = new Int32Array(rows);
    this.dist = new Float64Array(rows);
    this.data = new Float64Array(rows * dims);
  }
  buffer(i: number) { return this.bufs[i]; }
  setCentroids(c: Float32Array) {
    if (c.length !== this.c.length) throw new Error('bad centroid shape');
    this.c = Float64Array.from(c, (v) => Math.fround(v));
  }
  centroids() { return Float32Array.from(this.c); }
  // queued behind the calls before it, as the native engine's work: the centroids as of this call (the fake's passes
  // compute in finishPass), refused while a finishPass is pending
  async readCentroids() {
    if (this.finishing) throw new Error('contract violation: readCentroids while finishPass is pending');
    return this.centroids();
  }
  /** a pass is open (begun, finishPass not yet called) */
  get passOpen() { return this.mode !== undefined; }
  async initKmeansPlusPlus(sample: Buffer | Float32Array, n: number, seed: number) {
    const { dims: d, k } = this.options;
    const x = sample instanceof Float32Array ? sample : new Float32Array(sample.buffer, sample.byteOffset, n * d);
    this.lastSample = Float64Array.from(x.subarray(0, n * d));
    const rng = new Rng(seed, 99);
    const best = new Float64Array(n).fill(Infinity);
    let pick = rng.nextInt(n);
    for (let ci = 0; ci < k; ci++) {
      for (let j = 0; j < d; j++) this.c[ci * d + j] = x[pick * d + j];
      let total = 0;
      for (let i = 0; i < n; i++) {
        let s = 0;
        for (let j = 0; j < d; j++) s += (x[i * d + j] - this.c[ci * d + j]) ** 2;
        best[i] = Math.min(best[i], s);
        total += best[i];
      }
      let r = rng.nextFloat() * total;
      pick = n - 1;
      for (let i = 0; i < n; i++) { r -= best[i]; if (r < 0) { pick = i; break; } }
    }
  }
  beginPass(mode: PassMode) {
    if (this.mode) throw new Error('beginPass inside a pass');
    this.begun++;
    this.mode = mode;
    this.cancelled = false;
    this.violation = undefined;
    this.nextRow = this.passes > 0 ? this.plan.residentRows : 0;
    if (this.passes > 0 && this.resident) this.data.set(this.resident);
  }
  feed(b: number, first: number, count: number): Promise<void> {
    if (this.cancelled) return Promise.reject(new CancelledError());
    if (!this.mode) this.violation ??= 'feed outside a pass';
    if (first !== this.nextRow) this.violation ??= `fed row ${first}, expected ${this.nextRow}`;
    if (count < 1 || count > this.plan.chunkRows) this.violation ??= `bad count ${count}`;
    if (this.inFlight >= this.plan.buffers || this.busy.has(b)) this.violation ??= `buffer ${b} fed while busy (${this.inFlight} in flight)`;
    this.nextRow = first + count;
    this.inFlight++;
    this.busy.add(b);
    const snapshot = Buffer.from(this.bufs[b].subarray(0, count * this.plan.rowBytes));
    return new Promise((resolve, reject) => setTimeout(() => {
      if (!snapshot.equals(this.bufs[b].subarray(0, snapshot.length))) this.violation ??= `buffer ${b} rewritten while its feed was pending`;
      const f = new Float32Array(snapshot.buffer, snapshot.byteOffset, count * this.options.dims);
      this.data.set(f, first * this.options.dims);
      if (this.passes === 0 && first < this.plan.residentRows) {
        this.resident ??= new Float64Array(this.plan.residentRows * this.options.dims);
        this.resident.set(f.subarray(0, Math.min(count, this.plan.residentRows - first) * this.options.dims), first * this.options.dims);
      }
      this.inFlight--;
      this.busy.delete(b);
      if (this.cancelled) reject(new CancelledError()); else resolve();
    }, Math.random() * 2));
  }
  async finishPass(): Promise<PassResult> {
    this.finishing = true;
    queueMicrotask(() => { this.finishing = false; }); // before the caller's continuation
    const mode = this.mode!;
    this.mode = undefined;
    if (this.cancelled) throw new CancelledError();
    if (this.violation) throw new Error(`contract violation: ${this.violation}`);
    if (this.nextRow !== this.options.rows) throw new Error(`contract violation: pass ended at row ${this.nextRow}`);
    const { rows: n, dims: d, k } = this.options;
    const x = this.data;
    let inertia = 0;
    for (let i = 0; i < n; i++) {
      let best = Infinity, arg = 0;
      for (let ci = 0; ci < k; ci++) {
        let s = 0;
        for (let j = 0; j < d; j++) s += (x[i * d + j] - this.c[ci * d + j]) ** 2;
        if (s < best) { best = s; arg = ci; }
      }
      this.labelsNow[i] = arg;
      this.dist[i] = best;
      inertia += best;
    }
    let reassigned = n;
    if (this.prevLabels) { reassigned = 0; for (let i = 0; i < n; i++) if (this.prevLabels[i] !== this.labelsNow[i]) reassigned++; }
    this.prevLabels = Int32Array.from(this.labelsNow);
    const counts = new Float64Array(k);
    for (let i = 0; i < n; i++) counts[this.labelsNow[i]]++;
    let mean = 0;
    const mu = new Float64Array(d);
    for (let i = 0; i < n; i++) for (let j = 0; j < d; j++) mu[j] += x[i * d + j] / n;
    for (let i = 0; i < n; i++) for (let j = 0; j < d; j++) mean += (x[i * d + j] - mu[j]) ** 2 / n / d;
    let shift = 0, emptyReseeded = 0;
    if (mode === 'fit') {
      const sums = new Float64Array(k * d);
      for (let i = 0; i < n; i++) for (let j = 0; j < d; j++) sums[this.labelsNow[i] * d + j] += x[i * d + j];
      const next = new Float64Array(k * d);
      const taken = new Set<number>();
      for (let ci = 0; ci < k; ci++) {
        if (counts[ci] > 0) { for (let j = 0; j < d; j++) next[ci * d + j] = Math.fround(sums[ci * d + j] / counts[ci]); continue; }
        let far = -1;
        for (let i = 0; i < n; i++) if (!taken.has(i) && (far < 0 || this.dist[i] > this.dist[far])) far = i;
        taken.add(far);
        for (let j = 0; j < d; j++) next[ci * d + j] = x[far * d + j];
        emptyReseeded++;
      }
      for (let i = 0; i < k * d; i++) shift += (next[i] - this.c[i]) ** 2;
      this.c = next;
    }
    this.passes++;
    const resident = this.plan.residentRows;
    return {
      mode, inertia, reassigned, shift, emptyReseeded, counts, dataVariance: mean, ms: 0, update: mode === 'fit' ? 'host' : 'none', chained: false, begunByEngine: false, labelsDown: 'every',
      rowsFrom: { resident: this.passes > 1 ? resident : 0, host: 0, fed: this.passes > 1 ? n - resident : n }, heldRows: resident, hostRowsHeld: 0, rowsSettled: 0,
    };
  }
  labels(first = 0, count = this.options.rows - first) { return this.labelsNow.slice(first, first + count); }
  cancel() { this.cancelled = true; }
}

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-drv-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let blobs: string;
const N = 3000, D = 4, K = 6;
beforeAll(async () => {
  blobs = (await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows: N, dims: D, centers: K, seed: 5, clusterStd: 2.5 })).path;
});

const spec = (over: Partial<KmeansSpec> = {}): KmeansSpec => ({ k: K, metric: 'l2', init: 'kmeans++', maxIter: 100, tol: 0, tolReassign: 0, seed: 1, ...over });
const strip = (h: { ms: number; settledFraction?: number }[]) => h.map(({ ms, settledFraction, ...rest }) => rest);

async function fit(s: KmeansSpec, opts: EngineShape & { resume?: KmeansCheckpoint; onCp?: (cp: KmeansCheckpoint) => void } = {}) {
  const source = await LocalFileSource.open(blobs);
  const engine = new ContractEngine(N, D, s.k, opts);
  try {
    const result = await runKmeans({ engine, source, spec: s, resume: opts.resume, onIteration: (_r, cp) => opts.onCp?.(cp) });
    return { result, engine, labels: engine.labels() };
  } finally {
    await source.close();
  }
}

describe('runKmeans (contract engine)', () => {
  it('runs Lloyd to strict convergence and reports every iteration', async () => {
    const { result, labels } = await fit(spec());
    expect(result.converged).toBe(true);
    expect(result.stopReason).toBe('tolReassign');
    expect(result.history.at(-1)!.reassigned).toBe(0);
    expect(result.history[0].reassigned).toBe(N);
    expect(result.iterations).toBe(result.history.length);
    for (let i = 1; i < result.history.length; i++) expect(result.history[i].inertia).toBeLessThanOrEqual(result.history[i - 1].inertia * (1 + 1e-12));
    expect(result.inertia).toBeLessThanOrEqual(result.history.at(-1)!.inertia * (1 + 1e-12));
    expect(Array.from(result.counts).reduce((a, b) => a + b, 0)).toBe(N);
    expect(labels.length).toBe(N);
    expect(result.initMethod).toBe('kmeans++');
  });

  it('stops on maxIter, on sklearn tol (shift vs data variance) and on the reassigned fraction', async () => {
    const a = await fit(spec({ maxIter: 2, init: 'random' }));
    expect([a.result.iterations, a.result.stopReason, a.result.converged]).toEqual([2, 'maxIter', false]);
    const b = await fit(spec({ tol: 1e9, init: 'random' }));
    expect([b.result.iterations, b.result.stopReason, b.result.converged]).toEqual([1, 'tol', true]);
    const full = await fit(spec({ init: 'random' }));
    const h = full.result.history;
    // the first iteration whose shift ≤ tol·variance, for a tol between two observed shifts
    const t = 3;
    const tol = (h[t - 1].shift / full.result.dataVariance) * 1.0000001;
    const c = await fit(spec({ tol, init: 'random' }));
    const expected = h.findIndex((x) => x.reassigned > 0 && x.shift <= tol * full.result.dataVariance) + 1;
    expect(c.result.stopReason).toBe('tol');
    expect(c.result.iterations).toBe(Math.min(expected, t));
    const frac = h[2].reassignedFraction;
    const d = await fit(spec({ tolReassign: frac, init: 'random' }));
    expect(d.result.stopReason).toBe('tolReassign');
    expect(d.result.iterations).toBe(h.findIndex((x) => x.reassignedFraction <= frac) + 1);
    const z = await fit(spec({ maxIter: 0, init: 'random' }));
    expect([z.result.iterations, z.result.stopReason]).toEqual([0, 'maxIter']);
  });

  it('a resumed run is bitwise identical to an uninterrupted one, from any iteration', async () => {
    const cps: Buffer[] = [];
    const s = spec({ init: 'random', seed: 7 });
    const full = await fit(s, { onCp: (cp) => cps.push(encodeCheckpoint(cp)) });
    expect(full.result.iterations).toBeGreaterThanOrEqual(4);
    for (const t of [1, 2, full.result.iterations - 1, full.result.iterations]) {
      const cp = decodeCheckpoint(cps[t - 1]);
      expect(cp.iteration).toBe(t);
      const resumed = await fit(s, { resume: cp });
      expect(resumed.result.resumedFrom).toBe(t);
      expect(Buffer.from(resumed.result.centroids.buffer).equals(Buffer.from(full.result.centroids.buffer))).toBe(true);
      expect(strip(resumed.result.history)).toEqual(strip(full.result.history));
      expect(resumed.result.inertia).toBe(full.result.inertia);
      expect(resumed.result.stopReason).toBe(full.result.stopReason);
      expect(Buffer.from(resumed.labels.buffer).equals(Buffer.from(full.labels.buffer))).toBe(true);
    }
    const wrong = decodeCheckpoint(cps[0]);
    await expect(fit(spec({ k: K + 1, init: 'random' }), { resume: wrong })).rejects.toThrow(/checkpoint does not match this run: k/);
    // the plan the sums were added under (worker/job-engine.ts pins a GPU resume's chunk rows to it)
    expect(wrong.sumsPlan?.chunkRows).toBeGreaterThan(0);
    await expect(fit(s, { resume: { ...wrong, sumsPlan: { backend: 'cuda', chunkRows: wrong.rows + 1 } } })).rejects.toThrow(/checkpoint does not match this run: sums plan chunkRows/);
    await expect(fit(s, { resume: { ...wrong, sumsPlan: { backend: 'tpu' as 'cuda', chunkRows: 10 } } })).rejects.toThrow(/checkpoint does not match this run: sums plan backend tpu/);
  });

  it('on a device engine, the next pass starts before the bookkeeping: the same run, C(t) in checkpoint t', async () => {
    const s = spec({ init: 'random', seed: 7 });
    const cpuCps: KmeansCheckpoint[] = [];
    const cpu = await fit(s, { residentRows: N, onCp: (cp) => cpuCps.push(cp) });
    const source = await LocalFileSource.open(blobs);
    try {
      const engine = new ContractEngine(N, D, K, { backend: 'cuda', residentRows: N });
      const cps: KmeansCheckpoint[] = [];
      const begunAt: number[] = [];
      const result = await runKmeans({
        engine, source, spec: s,
        onIteration: async (_r, cp) => {
          cps.push(cp);
          begunAt.push(engine.begun);
          await new Promise((res) => setTimeout(res, 2)); // bookkeeping that outlasts the pass beside it
        },
      });
      expect(strip(result.history)).toEqual(strip(cpu.result.history));
      expect(Buffer.from(result.centroids.buffer).equals(Buffer.from(cpu.result.centroids.buffer))).toBe(true);
      expect(Array.from(engine.labels())).toEqual(Array.from(cpu.labels));
      expect(cps.length).toBe(cpuCps.length);
      cps.forEach((cp, i) => {
        expect(cp.iteration).toBe(i + 1);
        expect(Buffer.from(cp.centroids.buffer).equals(Buffer.from(cpuCps[i].centroids.buffer))).toBe(true);
        expect(Buffer.from(cp.previousCentroids.buffer).equals(Buffer.from(cpuCps[i].previousCentroids.buffer))).toBe(true);
      });
      // iteration t's bookkeeping ran with pass t+1 begun, except after the last iteration
      expect(begunAt).toEqual(cps.map((cp) => (cp.iteration < result.iterations ? cp.iteration + 1 : cp.iteration)));
      // on the CPU backend, one after the other: pass t+1 begins after iteration t's bookkeeping
      const cpuEngine = new ContractEngine(N, D, K, { residentRows: N });
      const cpuBegunAt: number[] = [];
      await runKmeans({ engine: cpuEngine, source, spec: s, onIteration: () => { cpuBegunAt.push(cpuEngine.begun); } });
      expect(cpuBegunAt).toEqual(cps.map((cp) => cp.iteration));

      // a failing onIteration stops the pass begun beside it and fails the run with its own error
      const failing = new ContractEngine(N, D, K, { backend: 'cuda', residentRows: N });
      await expect(runKmeans({
        engine: failing, source, spec: s,
        onIteration: (r) => { if (r.iteration === 2) throw new Error('checkpoint store down'); },
      })).rejects.toThrow('checkpoint store down');
      expect(failing.begun).toBe(3);
      expect(failing.passOpen).toBe(false);
    } finally {
      await source.close();
    }
  });

  it('random, kmeans++ and given init are deterministic by seed', async () => {
    const init = async (s: KmeansSpec) => (await fit({ ...s, maxIter: 0 })).result.centroids;
    const same = (a: Float32Array, b: Float32Array) => Buffer.from(a.buffer).equals(Buffer.from(b.buffer));
    for (const method of ['random', 'kmeans++'] as const) {
      const a = await init(spec({ init: method, seed: 3 }));
      expect(same(a, await init(spec({ init: method, seed: 3 })))).toBe(true);
      expect(same(a, await init(spec({ init: method, seed: 4 })))).toBe(false);
    }
    // random init picks k distinct rows of the dataset
    const x = decodeNpy(readFileSync(blobs)).data as Float32Array;
    const r = await init(spec({ init: 'random', seed: 9 }));
    const found = new Set<number>();
    for (let c = 0; c < K; c++) {
      const row = [...Array(N).keys()].find((i) => [...Array(D).keys()].every((j) => x[i * D + j] === r[c * D + j]));
      expect(row).toBeDefined();
      found.add(row!);
    }
    expect(found.size).toBe(K);
    const given = Float32Array.from({ length: K * D }, (_, i) => i);
    expect(same(await init(spec({ init: given })), given)).toBe(true);
    await expect(fit(spec({ init: new Float32Array(K * D - 1) }))).rejects.toThrow(KmeansSpecError);
    const nan = Float32Array.from(given); nan[5] = NaN;
    await expect(fit(spec({ init: nan }))).rejects.toThrow(/centroid 1 has a non-finite value \(NaN\) at dim 1/);
  });

  it('an init read before the engine opened (initRows) is the run it would have read itself, and is not read again', async () => {
    const given = Float32Array.from({ length: K * D }, (_, i) => (i % 7) - 3);
    for (const init of ['kmeans++', 'random', given] as const) {
      const s = spec({ init, maxIter: 3 });
      const run = async (early: boolean) => {
        const source = await LocalFileSource.open(blobs);
        let reads = 0;
        const read = source.read.bind(source);
        source.read = (first: number, count: number, target: Buffer) => { reads++; return read(first, count, target); };
        const initRows = early ? readInitRows(source, s) : undefined;
        const initReads = early ? (await initRows, reads) : 0;
        const engine = new ContractEngine(N, D, K);
        const result = await runKmeans({ engine, source, spec: s, initRows });
        await source.close();
        return { result, initReads, runReads: reads - initReads };
      };
      const itself = await run(false), early = await run(true);
      const what = init instanceof Float32Array ? 'given' : init;
      expect(Buffer.from(early.result.centroids.buffer).equals(Buffer.from(itself.result.centroids.buffer)), what).toBe(true);
      expect(strip(early.result.history), what).toEqual(strip(itself.result.history));
      // what readInitRows read is not read again: the run reads only its passes
      expect(early.initReads + early.runReads, what).toBe(itself.runReads);
      if (init !== given) expect(early.initReads, what).toBeGreaterThan(0);
    }
    // a failed read surfaces where the run awaits it
    const source = await LocalFileSource.open(blobs);
    const bad = readInitRows(source, spec({ init: new Float32Array(3) }));
    bad.catch(() => {});
    await expect(runKmeans({ engine: new ContractEngine(N, D, K), source, spec: spec(), initRows: bad }))
      .rejects.toThrow(/initial centroids have 3 values; expected k × dims = 6 × 4 = 24/);
    await source.close();
  });

  it('kmeans++ runs on 256 rows per centroid (all rows when fewer, within the budget), a seeded sample read with coalesced reads', async () => {
    expect(kmeansPlusPlusSampleSize(1000, 128, 10, 256 << 20)).toBe(1000);
    expect(kmeansPlusPlusSampleSize(1_000_000, 128, 100, 256 << 20)).toBe(1 << 16);
    expect(kmeansPlusPlusSampleSize(10_000_000, 128, 1000, 256 << 20)).toBe(256_000);
    expect(kmeansPlusPlusSampleSize(10_000_000, 128, 10_000, 256 << 20)).toBe(2_097_152); // the budget caps it
    expect(kmeansPlusPlusSampleSize(10_000_000, 16384, 100_000, 256 << 20)).toBe(100_000); // never below k
    // a dataset whose first column is the row index, so sampled rows can be identified
    const n = 5000, d = 3;
    const x = Float32Array.from({ length: n * d }, (_, i) => (i % d === 0 ? Math.floor(i / d) : Math.sin(i)));
    const path = join(dir, 'indexed.npy');
    writeFileSync(path, encodeNpy(x, [n, d]));
    const sampled = async (seed: number) => {
      const source = await LocalFileSource.open(path);
      const engine = new ContractEngine(n, d, 4);
      await runKmeans({ engine, source, spec: { ...spec({ k: 4, seed }), maxIter: 0 }, init: { sampleBudgetBytes: 12 * 1000 } });
      await source.close();
      return engine.lastSample!;
    };
    const s = await sampled(2);
    expect(s.length).toBe(1000 * d);
    const idx = Array.from({ length: 1000 }, (_, i) => s[i * d]);
    for (let i = 0; i < 1000; i++) {
      expect(s[i * d + 1]).toBe(Math.fround(Math.sin(idx[i] * d + 1)));
      if (i > 0) expect(idx[i]).toBeGreaterThan(idx[i - 1]); // sorted, distinct
    }
    expect(Array.from(await sampled(2))).toEqual(Array.from(s));
    expect(Array.from(await sampled(3))).not.toEqual(Array.from(s));
  });

  it('gathers scattered rows with coalesced reads, whatever the grouping', async () => {
    const source = await LocalFileSource.open(blobs);
    const all = Buffer.alloc(N * source.rowBytes);
    await source.read(0, N, all);
    const rng = new Rng(8);
    const want = Array.from(new Set(Array.from({ length: 400 }, () => rng.nextInt(N)))).sort((a, b) => a - b);
    want.push(N - 1, N - 2, N - 3);
    want.sort((a, b) => a - b);
    const uniq = Array.from(new Set(want));
    for (const o of [{}, { gapBytes: 0 }, { gapBytes: 16 * 20, maxSpanBytes: 16 * 50, concurrency: 3 }, { maxSpanBytes: 1, concurrency: 1 }]) {
      let reads = 0;
      const counting: RowSource = { ...source, rows: source.rows, dims: source.dims, dtype: source.dtype, rowBytes: source.rowBytes, describe: () => '', close: async () => undefined,
        read: (f, c, t) => { reads++; return source.read(f, c, t); } };
      const out = Buffer.alloc(uniq.length * source.rowBytes);
      await gatherRows(counting, uniq, out, o);
      uniq.forEach((r, i) => expect(out.subarray(i * 16, i * 16 + 16).equals(all.subarray(r * 16, r * 16 + 16))).toBe(true));
      if (Object.keys(o).length === 0) expect(reads).toBe(1); // 64 KiB gaps: one read for this small file
      if ('gapBytes' in o && o.gapBytes === 0) expect(reads).toBeLessThan(uniq.length); // adjacent rows N-3..N-1 share one read
    }
    await source.close();
  });

  it('feeds in row order with at most plan.buffers in flight, and skips resident rows after the first pass', async () => {
    const base = await fit(spec({ init: 'random', maxIter: 5 }), { chunkRows: 500, buffers: 2 });
    for (const o of [{ chunkRows: 128, buffers: 1 }, { chunkRows: 100, buffers: 4, residentRows: 1000 }, { chunkRows: 7, buffers: 3, residentRows: N }]) {
      const r = await fit(spec({ init: 'random', maxIter: 5 }), o);
      expect(strip(r.result.history)).toEqual(strip(base.result.history));
      expect(Array.from(r.labels)).toEqual(Array.from(base.labels));
    }
  });

  it('abort stops at a chunk boundary with the last checkpoint; a source error fails the pass', async () => {
    const source = await LocalFileSource.open(blobs);
    for (const backend of ['cpu', 'cuda'] as const) {
      const ac = new AbortController();
      const run = runKmeans({ engine: new ContractEngine(N, D, K, { chunkRows: 64, backend }), source, spec: spec({ init: 'random' }), signal: ac.signal, onIteration: (r) => { if (r.iteration === 2) setTimeout(() => ac.abort(), 5); } });
      const err = await run.catch((e) => e);
      expect(err).toBeInstanceOf(KmeansAbortedError);
      expect((err as KmeansAbortedError).checkpoint?.iteration).toBe(2);
      // aborted while onIteration still runs (the next pass already started on a device engine): the newest checkpoint
      const slow = new AbortController();
      const late = await runKmeans({
        engine: new ContractEngine(N, D, K, { chunkRows: 64, backend }), source, spec: spec({ init: 'random' }), signal: slow.signal,
        onIteration: async (r) => { if (r.iteration === 2) { slow.abort(); await new Promise((res) => setTimeout(res, 20)); } },
      }).catch((e) => e);
      expect(late).toBeInstanceOf(KmeansAbortedError);
      expect((late as KmeansAbortedError).checkpoint?.iteration).toBe(2);
    }

    let reads = 0;
    const flaky: RowSource = {
      rows: source.rows, dims: source.dims, dtype: source.dtype, rowBytes: source.rowBytes, describe: () => 'flaky',
      read: async (f, c, t) => { if (++reads === 30) throw new Error('disk on fire'); return source.read(f, c, t); },
      close: async () => undefined,
    };
    await expect(runKmeans({ engine: new ContractEngine(N, D, K, { chunkRows: 64 }), source: flaky, spec: spec({ init: 'random' }) })).rejects.toThrow('disk on fire');
    await source.close();
  });

  it('rejects bad specs and streams labels into an int32 .npy', async () => {
    await expect(fit(spec({ k: N + 1 }))).rejects.toThrow(/larger than the dataset/);
    await expect(fit(spec({ tolReassign: 2 }))).rejects.toThrow(/tolReassign/);
    await expect(fit(spec({ seed: -1 }))).rejects.toThrow(/seed/);
    const { result, engine } = await fit(spec({ maxIter: 3 }));
    const path = join(dir, 'labels.npy');
    const res = await writeLabels(engine, N, NpyWriter.toFile(path, '<i4', [N]));
    const back = decodeNpy(readFileSync(path));
    expect(back.shape).toEqual([N]);
    expect(Array.from(back.data as Int32Array)).toEqual(Array.from(engine.labels()));
    expect(res.bytes).toBe(readFileSync(path).length);
    expect(result.iterations).toBe(3);
  });
});
