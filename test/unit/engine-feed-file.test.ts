/**
 * Rows that no tier holds, read by the engine itself from their local file (Engine.feedFile, native/src/file_rows.h):
 * the same bits as the caller's reads, in every tier split and precision, the first failure in row order named, and
 * a file cut short an error, not a pass over garbage. test/gpu/engine-feed-file-cuda.test.ts runs it on a CUDA engine,
 * where the rows go up in pieces (cuda/upload_ring.h).
 */
import { mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine, InvalidArgumentError, NonFiniteInputError, type EngineOptions } from '../../native/index.js';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import type { RowSource } from '../../core/dataset/row-source.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import { runKmeans, type KmeansSpec } from '../../core/kmeans/index.js';
import { runPass } from '../../core/kmeans/pass-runner.js';

const backend = process.env.KMFLEET_TEST_BACKEND === 'cuda' ? 'cuda' : 'cpu';
const dir = mkdtempSync(join(tmpdir(), 'kmfleet-feedfile-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
// 9 chunks of 1,000 rows and a short last one; rows of 76 bytes (f32) or 38 (f16): pieces of whole rows, not 2^k
const N = 9_437, D = 19, K = 6, CHUNK = 1_000;
let f32: string, f16: string;
beforeAll(async () => {
  f32 = (await generateDataset(join(dir, 'a.npy'), { kind: 'blobs', rows: N, dims: D, centers: K, seed: 9, clusterStd: 2 })).path;
  f16 = (await generateDataset(join(dir, 'h.npy'), { kind: 'blobs', rows: N, dims: D, centers: K, seed: 9, clusterStd: 2, dtype: 'f16' })).path;
});

const spec = (over: Partial<KmeansSpec> = {}): KmeansSpec => ({ k: K, metric: 'l2', init: 'random', maxIter: 6, tol: 0, tolReassign: 0, seed: 4, ...over });
const bytes = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
const open = (rows: number, dims: number, k: number, over: Partial<EngineOptions>) =>
  Engine.open({ rows, dims, k, metric: 'l2', dtype: 'f32', backend, threads: backend === 'cpu' ? 3 : undefined, chunkRows: CHUNK, ...over });

/** the source without fileRows: every row through its read(), into the engine's buffers */
function readsOnly(source: LocalFileSource): RowSource {
  return {
    rows: source.rows, dims: source.dims, dtype: source.dtype, rowBytes: source.rowBytes,
    describe: () => source.describe(), read: (f, c, t) => source.read(f, c, t), close: () => source.close(),
  };
}

async function fit(path: string, s: KmeansSpec, engine: Partial<EngineOptions>, viaFile: boolean) {
  const source = await LocalFileSource.open(path);
  const e = await open(source.rows, source.dims, s.k, { dtype: source.dtype, metric: s.metric, ...engine });
  let fileFeeds = 0;
  const feedFile = e.feedFile.bind(e);
  e.feedFile = (...a) => (fileFeeds++, feedFile(...a));
  try {
    const result = await runKmeans({ engine: e, source: viaFile ? source : readsOnly(source), spec: s });
    return { result, labels: e.labels(), fileFeeds, plan: e.plan };
  } finally {
    e.close();
    await source.close();
  }
}

describe(`rows the engine reads from their file (${backend})`, () => {
  it('give the bits of the rows read by the caller, with rows resident, in the host tier and in the file', async () => {
    const splits: [string, Partial<EngineOptions>][] = [
      ['all in the file', { memoryBudget: 0, hostMemoryBudget: 0 }],
      // 3 whole chunks in the host tier, the rest from the file every pass
      ['host tier and file', { memoryBudget: 0, hostMemoryBudget: 3 * CHUNK * D * 4 + 11 }],
    ];
    if (backend === 'cpu') splits.push(['resident and file', { memoryBudget: 2 * CHUNK * D * 4, hostMemoryBudget: 0 }]);
    for (const [path, precision] of [[() => f32, 'fp32'], [() => f32, 'fp16'], [() => f16, 'fp16'], [() => f32, 'bf16']] as const) {
      for (const [name, engine] of splits) {
        for (const s of [spec(), spec({ init: 'kmeans++', metric: 'cosine' })]) {
          const what = `${precision} ${name} ${s.metric}`;
          const [file, reads] = [await fit(path(), s, { precision, ...engine }, true), await fit(path(), s, { precision, ...engine }, false)];
          const streamed = N - file.plan.residentRows - file.plan.hostRows;
          expect(file.fileFeeds, what).toBeGreaterThanOrEqual(Math.ceil(streamed / CHUNK) * file.result.history.length);
          expect(reads.fileFeeds, what).toBe(0);
          expect(bytes(file.result.centroids).equals(bytes(reads.result.centroids)), what).toBe(true);
          expect(bytes(file.labels).equals(bytes(reads.labels)), what).toBe(true);
          expect(file.result.inertia, what).toBe(reads.result.inertia);
          expect(file.result.history.map(({ ms, settledFraction, ...h }) => h), what).toEqual(reads.result.history.map(({ ms, settledFraction, ...h }) => h));
        }
      }
    }
  });

  it('a chunk read in parallel pieces names its first bad row in row order, whichever piece failed first', async () => {
    // 40,000 rows of 64 values kept as f16: a 1 MiB piece is 8,192 rows, so the chunk is five pieces read at once,
    // two of which fail at about the same time
    const rows = 40_000, dims = 64;
    const values = new Float32Array(rows * dims).map((_, i) => (i % 7) - 3);
    values[17_000 * dims + 5] = 70_000; // beyond fp16, in the third piece
    values[9_000 * dims + 1] = -1e6; // beyond fp16, in the second
    const path = join(dir, 'overflow.npy');
    writeFileSync(path, encodeNpy(values, [rows, dims]));
    for (let round = 0; round < 4; round++) {
      const source = await LocalFileSource.open(path);
      const e = await open(rows, dims, 2, { precision: 'fp16', chunkRows: rows, memoryBudget: 0, hostMemoryBudget: 0 });
      try {
        e.setCentroids(new Float32Array(2 * dims).map((_, i) => i));
        const err = await runPass(e, source, 'fit').catch((x: unknown) => x);
        expect(err).toBeInstanceOf(NonFiniteInputError);
        expect((err as NonFiniteInputError).row).toBe(9_000);
        expect(String(err)).toMatch(/row 9000 feature 1: -1000000 is beyond the range of fp16/);
      } finally {
        e.close();
        await source.close();
      }
    }
  });

  it('a file cut short after it was opened fails the pass naming where it ends; misuse is refused', async () => {
    const path = join(dir, 'cut.npy');
    writeFileSync(path, encodeNpy(new Float32Array(5_000 * 8).map((_, i) => i % 11), [5_000, 8]));
    const source = await LocalFileSource.open(path);
    const e = await open(5_000, 8, 3, { memoryBudget: 0, hostMemoryBudget: 0 });
    try {
      e.setCentroids(new Float32Array(24).map((_, i) => i));
      await runPass(e, source, 'fit');
      truncateSync(path, source.dataOffset + 3_500 * 32 + 7);
      const err = await runPass(e, source, 'fit').catch((x: unknown) => x);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect(String(err)).toMatch(new RegExp(`the rows' file ends at byte ${source.dataOffset + 3_500 * 32 + 7}, before the end of row 3500`));
      // the engine is still usable: the rows of a whole file, then misuse
      writeFileSync(path, encodeNpy(new Float32Array(5_000 * 8).map((_, i) => i % 11), [5_000, 8]));
      expect((await runPass(e, source, 'fit')).rowsFrom.fed).toBe(5_000);
      const at = source.fileRows(0, 1000)!;
      await expect(e.feedFile(at.fd, at.offset, 0, 1000)).rejects.toThrow(/feedFile outside a pass/);
      e.beginPass('fit');
      await expect(e.feedFile(-1, 0, 0, 1000)).rejects.toThrow(/needs four integers >= 0/);
      await expect(e.feedFile(at.fd, at.offset, 0, CHUNK + 1)).rejects.toThrow(/rowCount must be in 1\.\.1000/);
      await expect(e.feedFile(at.fd, at.offset, 1000, 1000)).rejects.toThrow(/feed out of sequence: expected firstRow 0, got 1000/);
      await e.feedFile(at.fd, at.offset, 0, 1000);
      await expect(e.feedFile(987_654, 0, 1000, 1000)).rejects.toThrow(/reading row 1000 from the rows' file at byte 0: Bad file descriptor/);
      await expect(e.finishPass()).rejects.toThrow(/Bad file descriptor/);
    } finally {
      e.close();
      await source.close();
    }
  });
});
