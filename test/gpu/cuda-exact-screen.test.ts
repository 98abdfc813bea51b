// Exact fp32 on Hopper screens every row with one product first and gives only the rows that screen can't decide
// the three products (cuda/assign_wgmma.cu kScreen, cuda/exact_screen_policy.h). The labels are exact either way, so
// an engine with the screen must match one without it (KMFLEET_EXACT_SCREEN=0, read at every assignment) bit for
// bit, pass after pass: on random rows (the screen decides most rows), on blobs (it passes on nearly all of them, and
// the policy switches it off after the first pass), with rows streamed, and with f16 input.
// KMFLEET_EXACT_SCREEN=only runs the screen alone (labels not exact): its labels must differ from the exact ones
// somewhere, or the screen never ran and the comparison above proved nothing.
// From the third screened pass on, the screen keys on each resident row's best from the previous pass (kScreenRef,
// 16-bit keys; KMFLEET_SCREEN_REF=0 turns that off, =always forces it): the six passes above run it from their
// second on, and the screen alone with and without it must give different labels somewhere, or it never ran (where
// the Hopper kernel runs: the plan's device names it).
import { afterEach, describe, expect, it } from 'vitest';

import type { Engine, PassResult } from '../../native/index.js';
import { blobData, bytesOf, normalData, pickRows, runPass, toF16 } from '../helpers/reference.js';
import { distinctRows, engineTracker } from './gpu-helpers.js';

const open = engineTracker();

afterEach(() => {
  delete process.env.KMFLEET_EXACT_SCREEN;
  delete process.env.KMFLEET_SCREEN_REF;
});

function bits(a: Float32Array): Uint32Array {
  return new Uint32Array(a.buffer, a.byteOffset, a.length);
}

// One pass of `e` with KMFLEET_EXACT_SCREEN set to `screen` (undefined: the default, screened) for its duration.
async function passWith(e: Engine, screen: string | undefined, data: Uint8Array, n: number, first: boolean): Promise<PassResult> {
  if (screen === undefined) delete process.env.KMFLEET_EXACT_SCREEN;
  else process.env.KMFLEET_EXACT_SCREEN = screen;
  try {
    return await runPass<PassResult>(e, data, n, 'fit', { skipBelow: first ? 0 : e.plan.residentRows });
  } finally {
    delete process.env.KMFLEET_EXACT_SCREEN;
  }
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
      const plain = await open(o);
      const screened = await open(o);
      if (c.memoryBudget !== undefined) expect(screened.plan.residentRows).toBeLessThan(c.n);
      plain.setCentroids(init);
      screened.setCentroids(init);
      for (let p = 0; p < 6; p++) {
        const a = await passWith(plain, '0', data, c.n, p === 0);
        // relative to the previous pass's best from the second pass on, stale guesses included (=always)
        process.env.KMFLEET_SCREEN_REF = 'always';
        const b = await passWith(screened, undefined, data, c.n, p === 0);
        delete process.env.KMFLEET_SCREEN_REF;
        expect(Object.is(b.inertia, a.inertia), `pass ${p}: inertia`).toBe(true);
        expect(Array.from(b.counts), `pass ${p}: counts`).toEqual(Array.from(a.counts));
        expect(screened.labels(), `pass ${p}: labels`).toEqual(plain.labels());
        expect(bits(screened.centroids()), `pass ${p}: centroids`).toEqual(bits(plain.centroids()));
      }
    });
  }

  // Two exact engines over the same 100,003 random rows (D = 64, K = 512) from the same initial centroids.
  const n = 100_003;
  async function twoEngines(seed: number): Promise<{ data: Uint8Array; a: Engine; b: Engine }> {
    const d = 64, k = 512;
    const x = normalData(n, d, seed);
    const init = pickRows(x, d, distinctRows(n, k, seed + 1));
    const o = { rows: n, dims: d, k, precision: 'fp32' as const, chunkRows: 16384 };
    const a = await open(o);
    const b = await open(o);
    a.setCentroids(init);
    b.setCentroids(init);
    return { data: bytesOf(x), a, b };
  }
  function rowsDiffering(a: ArrayLike<number>, b: ArrayLike<number>): number {
    let differ = 0;
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) differ++;
    return differ;
  }

  it('really screens: the screen alone gives other labels than the exact pass', async () => {
    const { data, a: exact, b: only } = await twoEngines(311);
    await passWith(exact, undefined, data, n, true);
    await passWith(only, 'only', data, n, true);
    const differ = rowsDiffering(exact.labels(), only.labels());
    expect(differ).toBeGreaterThan(0);
    expect(differ).toBeLessThan(n / 20);  // one fp16 product is close to the exact distance: few rows differ
  });

  // Relative keys are the Hopper kernel's (kScreenRef); the portable one screens on plain keys, so on a build or
  // device without wgmma (scripts/gpu-pack portable, KMFLEET_ASSIGN_KERNEL=mma) there is nothing to tell apart.
  it('really keys on the previous pass: the screen alone gives other labels with it than without it', async (ctx) => {
    const { data, a: relative, b: plain } = await twoEngines(321);
    ctx.skip(!relative.plan.device.includes('wgmma'), `the portable kernel runs here (${relative.plan.device})`);
    // three exact passes each (relative from the second on: KMFLEET_SCREEN_REF=always), the same labels after each
    for (let p = 0; p < 3; p++) {
      process.env.KMFLEET_SCREEN_REF = 'always';
      await passWith(relative, undefined, data, n, p === 0);
      process.env.KMFLEET_SCREEN_REF = '0';
      await passWith(plain, undefined, data, n, p === 0);
      delete process.env.KMFLEET_SCREEN_REF;
      expect(relative.labels()).toEqual(plain.labels());
    }
    process.env.KMFLEET_SCREEN_REF = 'always';
    await passWith(relative, 'only', data, n, false);
    process.env.KMFLEET_SCREEN_REF = '0';
    await passWith(plain, 'only', data, n, false);
    const differ = rowsDiffering(relative.labels(), plain.labels());
    expect(differ).toBeGreaterThan(0);
    expect(differ).toBeLessThan(n / 20);
  });
});
