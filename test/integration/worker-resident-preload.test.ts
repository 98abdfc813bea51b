/**
 * The worker hands the dataset's rows to the engine while they download (worker/dataset/resident-preload.ts →
 * engine.loadRows), so that its first pass starts where the held rows end; on real Redis, s3rver and the real engine
 * the outputs and every iteration's numbers stay bit for bit those of the driver run on the same file (what
 * `kmfleet fit` runs) — iteration 1's `reassigned` included. Also with a resident budget smaller than the dataset and
 * with random init (whose first pass may start before the download ends).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine, type EngineOptions } from '../../native/index.js';
import { readIterations } from '../../producer/job-state.js';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { runKmeans } from '../../core/kmeans/driver.js';
import type { KmeansResult } from '../../core/kmeans/types.js';
import { bytesOf, startStack, type Stack } from './pipeline-fixture.js';

const ROWS = 200_000, DIMS = 16, K = 10;
const ENGINE = { chunkRows: 4096, threads: 2 };

interface Seen {
  /** resolved values of loadRows, in order */
  held: number[];
  loadedRows: number;
  /** firstRow of each feed of the engine's first pass */
  firstPassFeeds: number[];
  residentRows: number;
}

/** the real engine, watched: its loads and the feeds of its first pass */
function watchedEngine(seen: Seen) {
  return async (o: EngineOptions) => {
    const engine = await Engine.open(o);
    seen.residentRows = engine.plan.residentRows;
    let passes = 0;
    const loadRows = engine.loadRows.bind(engine);
    engine.loadRows = async (rows, first, count) => {
      seen.loadedRows += count;
      const h = await loadRows(rows, first, count);
      seen.held.push(h);
      return h;
    };
    const beginPass = engine.beginPass.bind(engine);
    engine.beginPass = (m, opts) => {
      passes++;
      return beginPass(m, opts);
    };
    const feed = engine.feed.bind(engine);
    engine.feed = (b, first, count) => {
      if (passes === 1) seen.firstPassFeeds.push(first);
      return feed(b, first, count);
    };
    return engine;
  };
}

/** The driver on the local file, as `kmfleet fit` runs it. */
async function reference(path: string, init: 'kmeans++' | 'random', maxIter: number): Promise<{ r: KmeansResult; labels: Int32Array }> {
  const source = await LocalFileSource.open(path);
  const eng = await Engine.open({ rows: source.rows, dims: source.dims, k: K, metric: 'l2', dtype: source.dtype, backend: 'cpu', ...ENGINE });
  try {
    const r = await runKmeans({ engine: eng, source, spec: { k: K, metric: 'l2', init, maxIter, tol: 0, tolReassign: 0, seed: 3 } });
    return { r, labels: eng.labels() };
  } finally {
    eng.close();
    await source.close();
  }
}

describe('worker: rows go to the engine while they download', () => {
  let stack: Stack;
  let dir: string;
  let path: string;
  beforeAll(async () => {
    stack = await startStack({ clientJobOptions: { attempts: 1 } });
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-preload-'));
    path = (await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows: ROWS, dims: DIMS, centers: K, seed: 5, clusterStd: 3 })).path;
    await stack.s3.put('data', 'blobs.npy', readFileSync(path));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function run(jobId: string, init: 'kmeans++' | 'random', env: Record<string, string>): Promise<Seen> {
    const seen: Seen = { held: [], loadedRows: 0, firstPassFeeds: [], residentRows: 0 };
    const worker = await stack.startWorker(
      { KMFLEET_CHUNK_ROWS: String(ENGINE.chunkRows), KMFLEET_THREADS: String(ENGINE.threads), KMFLEET_S3_READ_PART_MB: '1', ...env },
      { openEngine: watchedEngine(seen) },
    );
    try {
      const maxIter = 6;
      await stack.client.enqueue(
        { dataset: { uri: 's3://data/blobs.npy' }, k: K, maxIter, tol: 0, seed: 3, init, backend: 'cpu', output: 's3://out/preload' },
        { jobId },
      );
      const result = await stack.client.wait(jobId, { timeoutMs: 60_000, pollMs: 20 });
      const ref = await reference(path, init, maxIter);
      const centroids = decodeNpy(await stack.s3.get('out', `preload/${jobId}/centroids.npy`));
      expect(bytesOf(centroids.data).equals(bytesOf(ref.r.centroids)), 'centroids bitwise').toBe(true);
      const labels = decodeNpy(await stack.s3.get('out', `preload/${jobId}/assignments.npy`));
      expect(bytesOf(labels.data).equals(bytesOf(ref.labels)), 'assignments bitwise').toBe(true);
      expect(result.inertia).toBe(ref.r.inertia);
      const iterations = await readIterations(await stack.client.connection(), stack.client.keys, jobId);
      expect(iterations.map(({ iteration, inertia, reassigned, shift }) => ({ iteration, inertia, reassigned, shift }))).toEqual(
        ref.r.history.map(({ iteration, inertia, reassigned, shift }) => ({ iteration, inertia, reassigned, shift })),
      );
      expect(iterations[0].reassigned, 'iteration 1 counts every row').toBe(ROWS);
    } finally {
      await worker.shutdown();
    }
    // the first pass started its feeds where the held rows end (none when every row is held)
    const held = seen.held.at(-1) ?? 0;
    expect(seen.firstPassFeeds[0] ?? ROWS).toBe(held);
    expect(seen.loadedRows).toBeLessThanOrEqual(seen.residentRows); // each row sent once, none past the budget
    return seen;
  }

  it('k-means++: rows are loaded in pieces during the download; the first pass feeds only what was not', async () => {
    const seen = await run('preload-pp', 'kmeans++', {});
    expect(seen.residentRows).toBe(ROWS);
    expect(seen.held.length).toBeGreaterThan(1); // in pieces, as blocks land
    // k-means++ samples every block, so nearly all of the download is in before the first pass (all of it, usually)
    expect(seen.held.at(-1)).toBeGreaterThan(ROWS / 2);
  });

  it('a resident budget smaller than the dataset: rows up to it are loaded, the first pass streams the rest', async () => {
    const seen = await run('preload-budget', 'kmeans++', { KMFLEET_GPU_MEMORY: '5M' });
    expect(seen.residentRows).toBeGreaterThan(0);
    expect(seen.residentRows).toBeLessThan(ROWS);
    expect(seen.held.at(-1)).toBeGreaterThan(0);
    expect(seen.firstPassFeeds.length).toBeGreaterThan(0);
  });

  it('random init: the first pass takes what was loaded by then and streams the rest; same bits', async () => {
    const seen = await run('preload-random', 'random', {});
    expect(seen.held.length).toBeGreaterThan(0);
  });
});
