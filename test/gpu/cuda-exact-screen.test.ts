// Exact fp32 on Hopper screens every row with one product first and gives only the rows that screen can't decide
// the three products (cuda/kernels/assign_wgmma.cu kScreen, cuda/exact_screen_policy.h). The labels are exact either way, so
// an engine with the screen must match one without it (cuda.exactScreen 'off') bit for bit, pass after pass: on
// random rows (the screen decides most rows), on blobs (it passes on nearly all of them, and the policy switches it
// off after the first pass), with rows streamed, and with f16 input.
// From the third screened pass on, the screen keys on each resident row's best from the previous pass (kScreenRef,
// 16-bit keys; cuda.relativeKeys 'off' turns that off, 'always' forces it): the screened engine below runs it from its
// second pass on, stale guesses included. That the screen and the relative keys really decide rows (their labels
// alone differ from the exact ones) is checked on the kernels, where the screen can run alone: kmbench check
// ("the screen decides rows", bench/gpu/tools/kmbench.cu checkScreenRuns).
import { describe, expect, it } from 'vitest';

import type { Engine, PassResult } from '../../native/index.js';
import { blobData, bytesOf, normalData, pickRows, runPass, toF16 } from '../helpers/reference.js';
import { distinctRows, engineTracker } from './gpu-helpers.js';

const open = engineTracker();

function bits(a: Float32Array): Uint32Array {
  return new Uint32Array(a.buffer, a.byteOffset, a.length);
}

async function pass(e: Engine, data: Uint8Array, n: number, first: boolean): Promise<PassResult> {
  return runPass<PassResult>(e, data, n, 'fit', { skipBelow: first ? 0 : e.plan.residentRows });
}

interface Case {
  name: string;
  n: number; d: number; k: number;
  data: 'random' | 'blobs';
  dtype?: 'f32' | 'f16';
  memoryBudget?: number;
}

const cases: Case[] = [
  { name: 'random rows, D = 128, K = 1000', n: 60_013, d: 128, k: 1000, data: 'random' },
  { name: 'blobs, D = 64, K = 256 (the policy turns the screen off)', n: 50_021, d: 64, k: 256, data: 'blobs' },
  { name: 'random rows, D = 200 (128-row blocks for the three products)', n: 30_011, d: 200, k: 300, data: 'random' },
  { name: 'random rows, some streamed', n: 40_009, d: 96, k: 500, data: 'random', memoryBudget: 16 * 1024 * 1024 },
  { name: 'f16 input, D = 33', n: 30_007, d: 33, k: 129, data: 'random', dtype: 'f16' },
];

describe('exact fp32: the one-product screen', () => {
  for (const c of cases) {
    it(`gives the labels and centroids of the unscreened kernel, bit for bit (${c.name})`, async () => {
      const x = c.data === 'random' ? normalData(c.n, c.d, 301 + c.d) : blobData(c.n, c.d, 32, 302 + c.d, 8, 1);
      const data = c.dtype === 'f16' ? bytesOf(toF16(x)) : bytesOf(x);
      const init = pickRows(x, c.d, distinctRows(c.n, c.k, 303));
      const o = { rows: c.n, dims: c.d, k: c.k, dtype: c.dtype ?? 'f32', precision: 'fp32' as const, chunkRows: 8192,
        ...(c.memoryBudget === undefined ? {} : { memoryBudget: c.memoryBudget }) };
      const plain = await open({ ...o, cuda: { exactScreen: 'off' } });
      const screened = await open({ ...o, cuda: { relativeKeys: 'always' } });
      if (c.memoryBudget !== undefined) expect(screened.plan.residentRows).toBeLessThan(c.n);
      plain.setCentroids(init);
      screened.setCentroids(init);
      for (let p = 0; p < 6; p++) {
        const a = await pass(plain, data, c.n, p === 0);
        const b = await pass(screened, data, c.n, p === 0);
        expect(Object.is(b.inertia, a.inertia), `pass ${p}: inertia`).toBe(true);
        expect(Array.from(b.counts), `pass ${p}: counts`).toEqual(Array.from(a.counts));
        expect(screened.labels(), `pass ${p}: labels`).toEqual(plain.labels());
        expect(bits(screened.centroids()), `pass ${p}: centroids`).toEqual(bits(plain.centroids()));
      }
    });
  }

  // Relative keys are the Hopper kernel's (kScreenRef); the portable one screens on plain keys, so on a build or
  // device without wgmma (scripts/gpu-pack portable, cuda.assignKernel 'portable') there is nothing to compare.
  it('gives the same labels with keys relative to the previous pass as without them', async (ctx) => {
    const n = 100_003, d = 64, k = 512;
    const x = normalData(n, d, 321);
    const init = pickRows(x, d, distinctRows(n, k, 322));
    const o = { rows: n, dims: d, k, precision: 'fp32' as const, chunkRows: 16384 };
    const relative = await open({ ...o, cuda: { relativeKeys: 'always' } });
    const plain = await open({ ...o, cuda: { relativeKeys: 'off' } });
    ctx.skip(!relative.plan.device.includes('wgmma'), `the portable kernel runs here (${relative.plan.device})`);
    relative.setCentroids(init);
    plain.setCentroids(init);
    const data = bytesOf(x);
    for (let p = 0; p < 4; p++) {
      const a = await pass(relative, data, n, p === 0);
      const b = await pass(plain, data, n, p === 0);
      expect(Object.is(a.inertia, b.inertia), `pass ${p}: inertia`).toBe(true);
      expect(relative.labels(), `pass ${p}: labels`).toEqual(plain.labels());
      expect(bits(relative.centroids()), `pass ${p}: centroids`).toEqual(bits(plain.centroids()));
    }
  });
});
