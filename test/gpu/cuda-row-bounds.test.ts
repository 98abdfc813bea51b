// Exact fp32 keeps Hamerly's bounds for the resident rows (cuda/resident_bounds.h): a pass moves them by the
// centroids' drift (the label's centroid's neighbours' where Hamerly's test fails), and once they settle most rows
// only the others are assigned: those with few centroids close by over those in fp64 (row_bounds.cuh near rows), the
// rest by the products (assign.cuh assignListedRows).
// The labels are exact either way, so an engine with bounds must match one without them (bounds 'off') bit for bit,
// pass after pass — on both kernels, screened or not, on clustered and random rows, f16 input, cosine, rows streamed
// (no bounds there), and when the caller moves the centroids or a duplicate centroid is re-seeded — while settling
// most rows of clustered data once it converges.
import { describe, expect, it } from 'vitest';

import type { Engine, EngineOptions, PassResult } from '../../native/index.js';
import { blobData, bytesOf, normalData, pickRows, runPass, toF16 } from '../helpers/reference.js';
import { distinctRows, engineTracker } from './gpu-helpers.js';

const open = engineTracker();

function bits(a: Float32Array): Uint32Array {
  return new Uint32Array(a.buffer, a.byteOffset, a.length);
}
const sameBytes = (a: ArrayBufferView, b: ArrayBufferView) =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

async function pass(e: Engine, data: Uint8Array, n: number, p: number, mode: 'fit' | 'assign' = 'fit'): Promise<PassResult> {
  return runPass<PassResult>(e, data, n, mode, { skipBelow: p === 0 ? 0 : e.plan.residentRows, distances: mode === 'assign' });
}

interface Case {
  name: string;
  n: number; d: number; k: number;
  data: 'random' | 'blobs';
  centers?: number; // blobs: as many as clusters unless said
  dtype?: 'f32' | 'f16';
  metric?: 'l2' | 'cosine';
  memoryBudget?: number;
  cuda?: EngineOptions['cuda'];
  settles: boolean; // whether most rows settle by the last passes
}

const cases: Case[] = [
  { name: 'blobs, D = 64, K = 256', n: 50_021, d: 64, k: 256, data: 'blobs', settles: true },
  { name: 'blobs, D = 200 (128-row blocks), K = 100', n: 30_011, d: 200, k: 100, data: 'blobs', settles: true },
  { name: 'blobs, the portable kernel', n: 40_009, d: 96, k: 128, data: 'blobs', cuda: { assignKernel: 'portable' }, settles: true },
  { name: 'blobs, screened every pass', n: 40_009, d: 64, k: 64, data: 'blobs', cuda: { relativeKeys: 'always' }, settles: true },
  { name: 'blobs, cosine', n: 30_007, d: 48, k: 64, data: 'blobs', metric: 'cosine', settles: true },
  { name: 'blobs, f16 input, D = 33', n: 30_007, d: 33, k: 64, data: 'blobs', dtype: 'f16', settles: true },
  // two centroids a blob: rows between them tie within the fp32 margin pass after pass, and with only the other within
  // reach they are near rows (row_bounds.cuh kNearMax), assigned by fp64 over the two
  { name: 'blobs, two centroids a blob', n: 50_021, d: 32, k: 96, centers: 48, data: 'blobs', settles: true },
  { name: 'random rows, D = 128, K = 500', n: 60_013, d: 128, k: 500, data: 'random', settles: false },
  // beyond kNeighbourK (row_bounds.cuh): Hamerly's test alone
  { name: 'blobs, K = 4100 (no neighbour lists)', n: 60_013, d: 16, k: 4100, data: 'blobs', settles: false },
  { name: 'blobs, some rows streamed', n: 40_009, d: 96, k: 64, data: 'blobs', memoryBudget: 16 * 1024 * 1024, settles: false },
];

describe('exact fp32: the resident rows\' bounds', () => {
  for (const c of cases) {
    it(`give the bits of a run without them (${c.name})`, async () => {
      // as many blobs as clusters: with several centroids in one blob, the centroids' drift stays above most rows' margins
      const x = c.data === 'random' ? normalData(c.n, c.d, 401 + c.d) : blobData(c.n, c.d, c.centers ?? c.k, 402 + c.d, 8, 1);
      const data = c.dtype === 'f16' ? bytesOf(toF16(x)) : bytesOf(x);
      const init = pickRows(x, c.d, distinctRows(c.n, c.k, 403));
      const o = { rows: c.n, dims: c.d, k: c.k, dtype: c.dtype ?? 'f32', metric: c.metric ?? 'l2', precision: 'fp32' as const,
        chunkRows: 8192, ...(c.memoryBudget === undefined ? {} : { memoryBudget: c.memoryBudget }), ...(c.cuda ? { cuda: c.cuda } : {}) };
      const off = await open({ ...o, bounds: 'off' });
      const on = await open(o);
      if (c.memoryBudget !== undefined) expect(on.plan.residentRows).toBeLessThan(c.n);
      off.setCentroids(init);
      on.setCentroids(init);
      const settled: number[] = [];
      const passes = 16;
      for (let p = 0; p < passes; p++) {
        const mode = p === passes - 1 ? 'assign' : 'fit';
        const a = await pass(off, data, c.n, p, mode);
        const b = await pass(on, data, c.n, p, mode);
        expect(a.rowsSettled, `pass ${p}: no bounds, nothing settled`).toBe(0);
        settled.push(b.rowsSettled / c.n);
        expect(Object.is(b.inertia, a.inertia), `pass ${p}: inertia`).toBe(true);
        expect(b.reassigned, `pass ${p}: reassigned`).toBe(a.reassigned);
        expect(Array.from(b.counts), `pass ${p}: counts`).toEqual(Array.from(a.counts));
        expect(sameBytes(on.labels(), off.labels()), `pass ${p}: labels`).toBe(true);
        expect(bits(on.centroids()), `pass ${p}: centroids`).toEqual(bits(off.centroids()));
      }
      expect(bits(on.distances()), 'distances').toEqual(bits(off.distances()));
      expect(settled.slice(0, 3).every((s) => s === 0), `no bounds in the first passes: ${settled}`).toBe(true);
      if (c.settles) expect(Math.min(...settled.slice(-4)), `settled shares ${settled}`).toBeGreaterThan(0.5);
      else if (c.memoryBudget !== undefined) expect(settled.every((s) => s === 0), `${settled}`).toBe(true);
    });
  }

  it('stay exact when centroids jump (setCentroids by the caller, a duplicate re-seeded)', async () => {
    const n = 40_000, d = 32, k = 48;
    const x = blobData(n, d, k, 405, 8, 1);
    const rows = distinctRows(n, k, 406);
    rows[1] = rows[0]; // a duplicate centroid: one of the two empties and is re-seeded
    const init = pickRows(x, d, rows);
    const data = bytesOf(x);
    const run = async (bounds: 'auto' | 'off') => {
      const e = await open({ rows: n, dims: d, k, precision: 'fp32', chunkRows: 8192, bounds });
      e.setCentroids(init);
      const out: { r: PassResult; c: Float32Array }[] = [];
      for (let p = 0; p < 14; p++) {
        if (p === 8) {
          // a caller's jump: half the centroids moved far, two swapped
          const c = e.centroids();
          for (let i = 0; i < (k / 2) * d; i++) c[i] += 3 * Math.sin(i);
          for (let j = 0; j < d; j++) [c[2 * d + j], c[3 * d + j]] = [c[3 * d + j], c[2 * d + j]];
          e.setCentroids(c);
        }
        const r = await pass(e, data, n, p, p === 13 ? 'assign' : 'fit');
        out.push({ r, c: e.centroids() });
      }
      return { out, labels: e.labels(), distances: e.distances() };
    };
    const on = await run('auto');
    const off = await run('off');
    expect(on.out.reduce((a, p) => a + p.r.emptyReseeded, 0)).toBeGreaterThan(0);
    on.out.forEach((p, i) => {
      const { ms: _a, rowsSettled: _b, counts: ca, ...ra } = p.r;
      const { ms: _c, rowsSettled: _d, counts: cb, ...rb } = off.out[i].r;
      expect(ra, `pass ${i}`).toEqual(rb);
      expect(Array.from(ca), `pass ${i}`).toEqual(Array.from(cb));
      expect(bits(p.c), `pass ${i}: centroids`).toEqual(bits(off.out[i].c));
    });
    expect(sameBytes(on.labels, off.labels), 'labels').toBe(true);
    expect(bits(on.distances)).toEqual(bits(off.distances));
    expect(on.out.slice(3, 8).some((p) => p.r.rowsSettled > 0), 'settled before the jump').toBe(true);
    expect(on.out.slice(10).some((p) => p.r.rowsSettled > 0), 'settled after the jump, from the moved bounds').toBe(true);
  });
});

describe('exact fp32 out of core: the host tier\'s rows\' bounds', () => {
  // the engine's host tier (host_tier.h) handed over whole each pass (skipBelow: the rows it holds, as a job does):
  // once its rows' bounds hold, a pass gathers only the open ones from host memory (cuda/tier_rows.h)
  async function heldPass(e: Engine, data: Uint8Array, n: number, held: number, mode: 'fit' | 'assign'): Promise<PassResult> {
    return runPass<PassResult>(e, data, n, mode, { skipBelow: held, sayFirstRow: true, distances: mode === 'assign' });
  }

  for (const c of [
    { name: 'part of the rows on the device', memoryBudget: 8 * 1024 * 1024 },
    { name: 'no rows on the device', memoryBudget: 0 },
    { name: 'f16 rows, no rows on the device', memoryBudget: 0, dtype: 'f16' as const },
  ]) {
    it(`give the bits of a run without them, reading only the open rows (${c.name})`, async () => {
      const n = 60_013, d = 96, k = 64;
      const x = blobData(n, d, k, 411, 8, 1);
      const data = c.dtype === 'f16' ? bytesOf(toF16(x)) : bytesOf(x);
      const init = pickRows(x, d, distinctRows(n, k, 412));
      const o = { rows: n, dims: d, k, dtype: c.dtype ?? 'f32', precision: 'fp32' as const, chunkRows: 8192, memoryBudget: c.memoryBudget };
      const run = async (bounds: 'auto' | 'off') => {
        const e = await open({ ...o, bounds });
        e.setCentroids(init);
        const out: { r: PassResult; c: Float32Array; labels: Int32Array }[] = [];
        let held = 0;
        for (let p = 0; p < 18; p++) {
          if (p === 12) {
            // a centroid sent far off: its cluster empties in a pass whose tier rows are gathered, and is re-seeded
            // from the farthest rows of every row (the tier read again for them)
            const cs = e.centroids();
            for (let j = 0; j < d; j++) cs[5 * d + j] = 1e4;
            e.setCentroids(cs);
          }
          const r = await heldPass(e, data, n, held, p === 17 ? 'assign' : 'fit');
          held = r.heldRows;
          out.push({ r, c: e.centroids(), labels: e.labels() });
        }
        return { out, distances: e.distances(), plan: e.plan };
      };
      const on = await run('auto');
      const off = await run('off');
      expect(on.plan.residentRows).toBeLessThan(n);
      expect(on.plan.hostRows).toBe(n - on.plan.residentRows);
      on.out.forEach((p, i) => {
        const { ms: _a, rowsSettled: _b, counts: ca, ...ra } = p.r;
        const { ms: _c, rowsSettled: _d, counts: cb, ...rb } = off.out[i].r;
        expect(ra, `pass ${i}`).toEqual(rb);
        expect(Array.from(ca), `pass ${i}: counts`).toEqual(Array.from(cb));
        expect(sameBytes(p.labels, off.out[i].labels), `pass ${i}: labels`).toBe(true);
        expect(bits(p.c), `pass ${i}: centroids`).toEqual(bits(off.out[i].c));
        expect(off.out[i].r.rowsSettled, `pass ${i}: nothing settled without bounds`).toBe(0);
      });
      expect(bits(on.distances)).toEqual(bits(off.distances));
      expect(on.out[12].r.emptyReseeded, 're-seeded in pass 12').toBeGreaterThan(0);
      // from the host tier every pass after the first, and mostly settled before the jump and again after it
      expect(on.out.slice(1).every((p) => p.r.rowsFrom.host === n - on.plan.residentRows && p.r.rowsFrom.fed === 0)).toBe(true);
      const settled = on.out.map((p) => p.r.rowsSettled / n);
      expect(Math.max(...settled.slice(5, 12)), `settled shares ${settled}`).toBeGreaterThan(0.5);
      expect(settled[12], `the pass of the jump gathered: ${settled}`).toBeGreaterThan(0);
      expect(Math.max(...settled.slice(14, 17)), `settled shares ${settled}`).toBeGreaterThan(0.5);
    });
  }
});
