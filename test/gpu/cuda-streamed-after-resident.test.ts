// A partly resident pass whose overlap partials did not fit (cuda/planner.cpp overlapPartials = 0): its streamed chunks
// run behind the resident rows on the compute stream instead of beside them (cuda/overlap_partials.h). Its labels and
// centroids must be the bits of a fully streamed run and of a fully resident one.
//
// The planner gives the partials at most an eighth of the device memory the engine may take (deviceMemory), one
// partial being K×D×8 + K×16 bytes: a shape beyond the exact statistics (K·D > 2^26, so the fit passes sum in fp64 in
// chunk order, cuda/kernels/accumulate.cuh) under a cap below eight partials has none, whatever else the plan holds.
// The plan does not report the partials; the test asserts the arithmetic that rules them out and that the pass is
// partly resident. The cap is found by opening engines under growing caps until the plan holds some of the rows.
import { describe, expect, it } from 'vitest';

import { type Engine, gpuInfo, InvalidArgumentError } from '../../native/index.js';
import { blobData, bytesOf, pickRows, toF16 } from '../helpers/reference.js';
import { distinctRows, engineTracker, fit } from './gpu-helpers.js';

const open = engineTracker();

describe.skipIf(!gpuInfo().available)('streamed chunks behind the resident rows (no room for the overlap partials)', () => {
  // K·D = 67,125,248 > 2^26: no exact statistics; a partial is 512 MiB, so any cap below 4 GiB leaves none
  const n = 4608, d = 16384, k = 4097, chunkRows = 1152;
  const partialBytes = k * d * 8 + k * 16;
  const base = { rows: n, dims: d, k, dtype: 'f16' as const, chunkRows, hostMemoryBudget: 0 };

  async function run(e: Engine, data: Uint8Array, init: Float32Array) {
    e.setCentroids(init);
    await fit(e, data, n, 3);
    return { c: e.centroids(), labels: e.labels(), resident: e.plan.residentRows };
  }

  it('gives the labels and centroids of a fully streamed and of a fully resident run, bit for bit', async () => {
    expect(k * d).toBeGreaterThan(2 ** 26);
    const x = blobData(n, d, 64, 71);
    const init = pickRows(x, d, distinctRows(n, k, 23));
    const data = bytesOf(toF16(x));

    // the smallest cap (in steps of 64 MiB) under which the plan keeps some rows resident, not all
    let part: Engine | undefined;
    let cap = 0;
    for (let mib = 1024; mib < 4096 && !part; mib += 64) {
      cap = mib * 2 ** 20;
      try {
        const e = await open({ ...base, deviceMemory: cap });
        if (e.plan.residentRows > 0) part = e;
        else e.close();
      } catch (err) {
        if (!(err instanceof InvalidArgumentError)) throw err;  // too small for the centroids and a chunk
      }
    }
    expect(part, 'a cap below 4 GiB that keeps some rows resident').toBeDefined();
    expect(cap, 'below eight partials: the planner reserves none').toBeLessThan(8 * partialBytes);
    const partly = await run(part!, data, init);
    expect(partly.resident).toBeGreaterThanOrEqual(chunkRows);
    expect(partly.resident).toBeLessThan(n);

    const streamed = await run(await open({ ...base, memoryBudget: 0 }), data, init);
    expect(streamed.resident).toBe(0);
    const resident = await run(await open(base), data, init);
    expect(resident.resident).toBe(n);

    for (const [what, other] of [['fully streamed', streamed], ['fully resident', resident]] as const) {
      expect(Buffer.from(partly.labels.buffer).equals(Buffer.from(other.labels.buffer)), `${what}: labels`).toBe(true);
      expect(Buffer.from(partly.c.buffer).equals(Buffer.from(other.c.buffer)), `${what}: centroids`).toBe(true);
    }
  });
});
