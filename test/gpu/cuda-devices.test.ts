// One process, several GPUs: a worker drives one engine per device (worker/device-pool.ts). What a kernel may opt in
// to (its dynamic shared memory beyond 48 KB: the assignment kernels, the exact statistics) is an attribute of the
// function in one device's context, so each device must get it, not only the first one a kernel ran on. Runs on a
// machine with two or more GPUs (scripts/gpu-run devices); skipped with one.
import { describe, expect, it } from 'vitest';

import { gpuInfo, type Precision } from '../../native/index.js';
import { bytesOf, normalData, pickRows } from '../helpers/reference.js';
import { distinctRows, engineTracker, fit } from './gpu-helpers.js';

const open = engineTracker();
const devices = gpuInfo().devices;

describe.skipIf(devices.length < 2)(`one process, several devices (${devices.length} here)`, () => {
  const n = 40_000, d = 128, k = 256;
  const x = normalData(n, d, 7);
  const init = pickRows(x, d, distinctRows(n, k, 3));

  async function run(device: number, precision: Precision) {
    const e = await open({ rows: n, dims: d, k, precision, device, chunkRows: 8192 });
    e.setCentroids(init);
    const r = await fit(e, bytesOf(x), n, 4);
    return { c: Buffer.from(e.centroids().buffer), inertia: r.map((p) => p.inertia), plan: e.plan };
  }

  for (const precision of ['fp32', 'fp16'] as Precision[]) {
    it(`${precision}: every device runs the kernels the first one ran, and gives the same bits`, async () => {
      const first = await run(devices[0].ordinal, precision);  // the kernels opt in on device 0 first
      const others = [];
      for (const dev of devices.slice(1)) others.push(await run(dev.ordinal, precision));
      // and all at once, one engine per device, as the worker runs them
      const together = await Promise.all(devices.map((dev) => run(dev.ordinal, precision)));
      for (const [i, r] of [...others, ...together].entries()) {
        const dev = i < others.length ? devices[i + 1] : devices[i - others.length];
        expect(r.plan.precision).toBe(precision);
        if (dev.name !== devices[0].name) continue;  // another model may plan otherwise; it must only run
        expect(r.c.equals(first.c), `centroids on device ${dev.ordinal}`).toBe(true);
        expect(r.inertia, `inertia on device ${dev.ordinal}`).toEqual(first.inertia);
      }
    });
  }
});
