// One job across several GPUs of the process (EngineOptions.devices, cuda/multi_device_backend.h): its rows split into
// one share per device, each kept on its device and in its own host tier, the lanes' exact statistics added on the
// first device. Every pass must give the bits of the same job on one GPU — centroids, labels, distances, inertia,
// counts — in core, out of core, in every precision, with empty clusters re-seeded from all shares; and a bad row of
// a later share is reported by its row in the job. Runs where the machine has two or more GPUs (scripts/gpu-run).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeCheckpoint, encodeCheckpoint, runKmeans, type KmeansCheckpoint, type KmeansSpec } from '../../core/kmeans/index.js';

import { Engine as NativeEngine, gpuInfo, NonFiniteInputError, type Engine, type EngineOptions, type PassResult, type Precision } from '../../native/index.js';
import { bytesOf, normalData, pickRows, runPass } from '../helpers/reference.js';
import { distinctRows, engineTracker } from './gpu-helpers.js';

const open = engineTracker();
const devices = gpuInfo().devices.map((d) => d.ordinal);

interface Run {
  passes: PassResult[];
  centroids: Buffer;
  labels: Int32Array;
  distances: Float32Array;
  plan: Engine['plan'];
}

/** `fits` fit passes (each feeding only the rows the engine does not hold), then an assign pass with distances. */
async function job(o: Partial<EngineOptions> & Pick<EngineOptions, 'rows' | 'dims' | 'k'>, data: Uint8Array, init: Float32Array,
  fits: number): Promise<Run> {
  const e = await open({ chunkRows: 8192, ...o });
  e.setCentroids(init);
  const passes: PassResult[] = [];
  let held = 0;
  for (let p = 0; p <= fits; p++) {
    const mode = p < fits ? 'fit' : 'assign';
    const r = await runPass<PassResult>(e, data, o.rows, mode, { distances: mode === 'assign', skipBelow: held, sayFirstRow: true });
    passes.push(r);
    held = r.heldRows;
  }
  return { passes, centroids: Buffer.from(e.centroids().buffer), labels: e.labels(), distances: e.distances(), plan: e.plan };
}

function expectSameBits(many: Run, one: Run, what: string): void {
  expect(many.plan.device, what).toMatch(/^\d+ × /);
  expect(many.centroids.equals(one.centroids), `${what}: centroids`).toBe(true);
  expect(Buffer.from(many.labels.buffer).equals(Buffer.from(one.labels.buffer)), `${what}: labels`).toBe(true);
  expect(Buffer.from(many.distances.buffer).equals(Buffer.from(one.distances.buffer)), `${what}: distances`).toBe(true);
  expect(many.passes.map((p) => p.inertia), `${what}: inertia`).toEqual(one.passes.map((p) => p.inertia));
  expect(many.passes.map((p) => p.counts), `${what}: counts`).toEqual(one.passes.map((p) => p.counts));
  expect(many.passes.map((p) => p.reassigned), `${what}: reassigned`).toEqual(one.passes.map((p) => p.reassigned));
  expect(many.passes.map((p) => p.emptyReseeded), `${what}: re-seeded`).toEqual(one.passes.map((p) => p.emptyReseeded));
}

describe.skipIf(devices.length < 2)(`one job across ${devices.length} devices`, () => {
  const n = 150_001, d = 96, k = 300;  // shares off the chunk grid, a short last chunk
  const x = normalData(n, d, 11);
  const data = bytesOf(x);
  const init = pickRows(x, d, distinctRows(n, k, 5));
  const two = devices.slice(0, 2);

  for (const precision of ['fp32', 'fp16', 'bf16'] as Precision[]) {
    it(`${precision}, in core: the bits of one GPU`, async () => {
      const one = await job({ rows: n, dims: d, k, precision, device: two[0] }, data, init, 5);
      const many = await job({ rows: n, dims: d, k, precision, devices: two }, data, init, 5);
      expectSameBits(many, one, precision);
      expect(many.passes.at(-2)!.rowsFrom.fed).toBe(0);  // every row held by the lanes after the first pass
    });
  }

  it('out of core: rows on the devices, in the lanes\' host tiers and fed by the caller give the bits of one GPU', async () => {
    const one = await job({ rows: n, dims: d, k, device: two[0] }, data, init, 4);
    // part of each share on its device (~20K rows), part in its host tier, the rest fed by the caller every pass
    const rowBytes = d * 4;
    const capped = await job({ rows: n, dims: d, k, devices: two, memoryBudget: 8 << 20, hostMemoryBudget: Math.floor(n / 3) * rowBytes },
      data, init, 4);
    expectSameBits(capped, one, 'out of core');
    expect(capped.passes.at(-2)!.rowsFrom.fed).toBeGreaterThan(0);
    // no rows on the devices: every share streamed from its host tier
    const streamed = await job({ rows: n, dims: d, k, devices: two, memoryBudget: 0 }, data, init, 4);
    expectSameBits(streamed, one, 'host tiers');
    // every row in the lanes' host tiers, and said so: in the plan and in where each later pass's rows came from
    expect(streamed.plan.residentRows).toBe(0);
    expect(streamed.plan.hostRows).toBe(n);
    expect(streamed.passes.at(-2)!.rowsFrom).toEqual({ resident: 0, host: n, fed: 0 });
    const from = capped.passes.at(-2)!.rowsFrom;
    expect(from.resident).toBe(capped.plan.residentRows);
    expect(from.resident + from.host + from.fed).toBe(n);
    expect(from.fed).toBe(n - capped.plan.residentRows - capped.plan.hostRows);
  });

  it('planned chunks split the rows evenly between the devices, with the bits of one GPU', async () => {
    // 1.1M rows of 512 bytes: more than one planned chunk (128 MiB) a share, which does not divide it
    const rows = 1_100_001, dims = 128;
    const y = normalData(rows, dims, 12);
    const start = pickRows(y, dims, distinctRows(rows, 64, 6));
    const one = await job({ rows, dims, k: 64, device: two[0], chunkRows: undefined, memoryBudget: 0 }, bytesOf(y), start, 3);
    const many = await job({ rows, dims, k: 64, devices: two, chunkRows: undefined, memoryBudget: 0 }, bytesOf(y), start, 3);
    expectSameBits(many, one, 'planned chunks');
    const chunk = many.plan.chunkRows, half = Math.ceil(rows / 2);
    const chunksPerShare = Math.ceil(half / chunk);
    expect(chunksPerShare).toBeGreaterThan(1);
    // the first share (whole chunks) exceeds half the rows by less than a row per chunk, not by up to a chunk
    expect(chunksPerShare * chunk - half).toBeLessThan(chunksPerShare);
  });

  it('all the devices at once, cosine', async () => {
    const one = await job({ rows: n, dims: d, k, metric: 'cosine', device: devices[0] }, data, init, 4);
    const all = await job({ rows: n, dims: d, k, metric: 'cosine', devices }, data, init, 4);
    expectSameBits(all, one, `cosine on ${devices.length}`);
  });

  it('empty clusters are re-seeded from the farthest rows of every share, as on one GPU', async () => {
    const far = Float32Array.from(init);
    for (let c = 0; c < 40; c++) for (let j = 0; j < d; j++) far[c * d + j] = 1e4 + c;  // centroids no row is near
    const one = await job({ rows: n, dims: d, k, device: two[0] }, data, far, 3);
    const many = await job({ rows: n, dims: d, k, devices: two }, data, far, 3);
    expect(one.passes[0]!.emptyReseeded).toBeGreaterThanOrEqual(40);
    expectSameBits(many, one, 're-seeding');
  });

  it('a non-finite value in a later share fails the pass with its row in the job', async () => {
    const bad = Float32Array.from(x);
    const row = n - 17;
    bad[row * d + 5] = Number.NaN;
    const e = await open({ rows: n, dims: d, k, devices: two, chunkRows: 8192 });
    e.setCentroids(init);
    const failed = await runPass(e, bytesOf(bad), n, 'fit').catch((err: unknown) => err);
    expect(failed).toBeInstanceOf(NonFiniteInputError);
    expect((failed as NonFiniteInputError).row).toBe(row);
  });

  it('refuses a device named twice and a device that does not exist', async () => {
    await expect(open({ rows: n, dims: d, k, devices: [two[0], two[0]] })).rejects.toThrow(/named once/);
    await expect(open({ rows: n, dims: d, k, devices: [two[0], 99] })).rejects.toThrow(/device 99 does not exist/);
  });

  it('a checkpoint of a job on two GPUs resumes on one (and back) with the bits of an uninterrupted run', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kmfleet-multi-'));
    try {
      const path = (await generateDataset(join(dir, 'b.npy'), { kind: 'blobs', rows: 120_000, dims: 40, centers: 50, seed: 3, clusterStd: 3 })).path;
      const spec: KmeansSpec = { k: 64, metric: 'l2', init: 'kmeans++', maxIter: 25, tol: 0, tolReassign: 0, seed: 5 };
      const run = async (devices: number[], resume?: KmeansCheckpoint, onCp?: (cp: KmeansCheckpoint) => void) => {
        const source = await LocalFileSource.open(path);
        const engine = await NativeEngine.open({ rows: source.rows, dims: source.dims, k: spec.k, metric: 'l2', dtype: source.dtype, backend: 'cuda',
          chunkRows: 4096, ...(devices.length > 1 ? { devices } : { device: devices[0] }) });
        try {
          const result = await runKmeans({ engine, source, spec, resume, onIteration: (_r, cp) => onCp?.(cp) });
          return { result, labels: Buffer.from(engine.labels().buffer) };
        } finally {
          engine.close();
          await source.close();
        }
      };
      const cps: Buffer[] = [];
      const full = await run(two, undefined, (cp) => cps.push(encodeCheckpoint(cp)));
      const one = await run([two[0]]);
      expect(Buffer.from(one.result.centroids.buffer).equals(Buffer.from(full.result.centroids.buffer))).toBe(true);
      const at = Math.ceil(full.result.iterations / 2);
      for (const devices of [[two[0]], [two[1]], two]) {
        const resumed = await run(devices, decodeCheckpoint(cps[at - 1]));
        expect(Buffer.from(resumed.result.centroids.buffer).equals(Buffer.from(full.result.centroids.buffer)), `on ${devices}`).toBe(true);
        expect(resumed.result.inertia).toBe(full.result.inertia);
        expect(resumed.labels.equals(full.labels)).toBe(true);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
