// The fit update computed on the device (backend.h DeviceUpdate, cuda/kernels/centroid_update.cu) instead of on the host
// (engine_update.cpp) must give the same bits: next centroids, shift, data variance and labels, pass after pass —
// l2 and cosine, f32 and f16 rows, every row resident or some streamed, across a pass that re-seeds an empty cluster
// (that one runs on the host: its sums come down), a cancelled pass, and setCentroids replacing the centroids the
// device kept. The option `update: 'host'` keeps an engine's update on the host.
import { describe, expect, it } from 'vitest';

import { CancelledError, type Engine, type PassResult } from '../../native/index.js';
import { blobData, bytesOf, pickRows, runPass, toF16 } from '../helpers/reference.js';
import { distinctRows, engineTracker } from './gpu-helpers.js';

const open = engineTracker();

async function openPair(o: Parameters<typeof open>[0]): Promise<{ host: Engine; device: Engine }> {
  const host = await open({ ...o, update: 'host' });
  const device = await open(o);
  return { host, device };
}

function bits(a: Float32Array): Uint32Array {
  return new Uint32Array(a.buffer, a.byteOffset, a.length);
}

function expectSamePass(h: PassResult, g: PassResult, what: string): void {
  expect(Object.is(g.shift, h.shift), `${what}: shift ${g.shift} vs ${h.shift}`).toBe(true);
  expect(Object.is(g.dataVariance, h.dataVariance), `${what}: data variance ${g.dataVariance} vs ${h.dataVariance}`).toBe(true);
  expect(Object.is(g.inertia, h.inertia), `${what}: inertia`).toBe(true);
  expect(g.reassigned, `${what}: reassigned`).toBe(h.reassigned);
  expect(g.emptyReseeded, `${what}: emptyReseeded`).toBe(h.emptyReseeded);
  expect(Array.from(g.counts), `${what}: counts`).toEqual(Array.from(h.counts));
}

function expectSameState(host: Engine, device: Engine, what: string): void {
  expect(bits(device.centroids()), `${what}: centroids`).toEqual(bits(host.centroids()));
  expect(device.labels(), `${what}: labels`).toEqual(host.labels());
}

interface Case {
  name: string;
  n: number; d: number; k: number;
  metric: 'l2' | 'cosine';
  dtype: 'f32' | 'f16';
  memoryBudget?: number;
}

const cases: Case[] = [
  { name: 'l2 f32, every row resident', n: 40_011, d: 37, k: 64, metric: 'l2', dtype: 'f32' },
  { name: 'l2 f16 rows, D = 128', n: 30_007, d: 128, k: 300, metric: 'l2', dtype: 'f16' },
  { name: 'cosine f32, some rows streamed', n: 30_001, d: 100, k: 33, metric: 'cosine', dtype: 'f32', memoryBudget: 3 * 4096 * 800 },
  { name: 'l2 f32, D = 1, K = 7', n: 9_001, d: 1, k: 7, metric: 'l2', dtype: 'f32' },
];

describe('the fit update on the device', () => {
  for (const c of cases) {
    it(`has the host update's bits pass after pass (${c.name})`, async () => {
      const chunk = 4096;
      const x = blobData(c.n, c.d, c.k, 91 + c.d, 6, 1.5);
      const data = c.dtype === 'f16' ? bytesOf(toF16(x)) : bytesOf(x);
      const init = pickRows(x, c.d, distinctRows(c.n, c.k, 92));
      const o = { rows: c.n, dims: c.d, k: c.k, metric: c.metric, dtype: c.dtype, chunkRows: chunk,
        ...(c.memoryBudget === undefined ? {} : { memoryBudget: c.memoryBudget }) };
      const { host, device } = await openPair(o);
      if (c.memoryBudget !== undefined) expect(device.plan.residentRows).toBeLessThan(c.n);
      host.setCentroids(init);
      device.setCentroids(init);
      const first: PassResult[] = [];
      let onDevice = 0;
      for (let p = 0; p < 8; p++) {
        if (p === 3) {  // a cancelled pass in between changes nothing
          for (const e of [host, device]) {
            e.beginPass('fit');
            e.cancel();
            await expect(e.finishPass()).rejects.toBeInstanceOf(CancelledError);
          }
        }
        if (p === 5) {  // the caller's centroids replace the ones the device kept
          host.setCentroids(init);
          device.setCentroids(init);
        }
        const r: PassResult[] = [];
        // pass 7: a read while the device's pass is open gives the centroids that pass started from; so does pass 4's
        // read queued on the engine right behind the pass's begin (readCentroids, as the job's driver reads them)
        const before = p === 7 || p === 4 ? host.centroids() : undefined;
        let queuedRead: Promise<Float32Array> | undefined;
        for (const e of [host, device]) {
          // pass 6 without the data variance (the driver asks once a run): the update without its terms. Odd passes
          // tell beginPass where the feeds start (firstRow): the device starts on its resident rows right away
          const pending = runPass<PassResult>(e, data, c.n, 'fit', {
            skipBelow: p === 0 ? 0 : e.plan.residentRows, dataVariance: p !== 6, sayFirstRow: p % 2 === 1,
            onBegin: p === 4 && e === device ? () => { queuedRead = device.readCentroids(); } : undefined,
          });
          if (p === 7 && e === device) expect(bits(device.centroids()), 'read while pass 7 is open').toEqual(bits(before!));
          r.push(await pending);
        }
        if (p === 4) expect(bits(await queuedRead!), 'readCentroids queued behind pass 4\'s begin').toEqual(bits(before!));
        expectSamePass(r[0], r[1], `pass ${p}`);
        expect(Number.isNaN(r[1].dataVariance), `pass ${p}: data variance asked`).toBe(p === 6);
        // passes 1 and 2 go unread: their centroids stay on the device until pass 3's are read
        if (p !== 1 && p !== 2) expectSameState(host, device, `pass ${p}`);
        expect(r[0].update).toBe('host');
        // on the device unless the pass left a cluster empty (then the sums come down and the host re-seeds)
        const empty = Array.from(r[1].counts).includes(0);
        expect(r[1].update, `pass ${p}`).toBe(empty ? 'host' : 'device');
        if (!empty) onDevice++;
        if (p === 0) first.push(r[1]);
        if (p === 5) expect(Object.is(r[1].shift, first[0].shift), 'pass 5 starts again from the init').toBe(true);
      }
      expect(onDevice).toBeGreaterThanOrEqual(5);
      const a = await runPass<PassResult>(device, data, c.n, 'assign', { skipBelow: device.plan.residentRows });
      expect(a.update).toBe('none');
    });
  }

  it('re-seeds an empty cluster on the host and goes on on the device with the same bits', async () => {
    const n = 20_003, d = 16, k = 20, chunk = 4096;
    const x = blobData(n, d, 10, 93, 6, 1);
    const init = pickRows(x, d, distinctRows(n, k, 94));
    for (let j = 0; j < d; j++) init[(k - 1) * d + j] = 1e4;  // far from every row: empty after the first pass
    const { host, device } = await openPair({ rows: n, dims: d, k, chunkRows: chunk });
    host.setCentroids(init);
    device.setCentroids(init);
    const where: string[] = [];
    let reseeded = 0;
    for (let p = 0; p < 5; p++) {
      const h = await runPass<PassResult>(host, bytesOf(x), n, 'fit', { skipBelow: p === 0 ? 0 : host.plan.residentRows });
      const g = await runPass<PassResult>(device, bytesOf(x), n, 'fit', { skipBelow: p === 0 ? 0 : device.plan.residentRows });
      expectSamePass(h, g, `pass ${p}`);
      expectSameState(host, device, `pass ${p}`);
      where.push(g.update);
      reseeded += g.emptyReseeded;
    }
    expect(reseeded).toBeGreaterThan(0);
    expect(where[0]).toBe('host');  // the pass that left centroid k−1 empty brought its sums down
    expect(where.slice(1)).toContain('device');
  });

  it('leaves the centroids on the device until they are read, and fetches them when the host needs them', async () => {
    // 1-D rows built so that cluster 1 loses both its rows to its neighbours' updated centroids in the second pass:
    // pass 0 updates on the device (every cluster has rows) and nobody reads its centroids; pass 1 leaves cluster 1
    // empty, so the host re-seeds it and needs the centroids the device kept (Engine::passCentroids fetches them).
    // Passes 2-5 go back to the device, unread.
    const n = 4, d = 1, k = 3;
    const x = new Float32Array([-0.5, 0, 2, 2.5]);
    const init = new Float32Array([-1.5, 1, 3.5]);
    const { host, device } = await openPair({ rows: n, dims: d, k, chunkRows: 4096 });
    host.setCentroids(init);
    device.setCentroids(init);
    const where: string[] = [];
    for (let p = 0; p < 6; p++) {
      const h = await runPass<PassResult>(host, bytesOf(x), n, 'fit', { skipBelow: p === 0 ? 0 : host.plan.residentRows });
      const g = await runPass<PassResult>(device, bytesOf(x), n, 'fit', { skipBelow: p === 0 ? 0 : device.plan.residentRows });
      expectSamePass(h, g, `pass ${p}`);
      where.push(g.update);
    }
    expect(where.slice(0, 2), 'pass 0 on the device, pass 1 re-seeds on the host').toEqual(['device', 'host']);
    expect(where.slice(2)).toContain('device');
    expectSameState(host, device, 'after six passes, read only at the end');
  });
});
