/**
 * openJobEngine's rules (worker/job-engine.ts), on the real CPU engine: which resumes get the checkpoint's chunk rows,
 * what a configured chunk and a device that cannot take the recorded chunk do, and what each says in the log. That the
 * pinned chunk keeps a CUDA run's bits is checked on the GPU (test/gpu/kmeans-driver-cuda.test.ts).
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Engine, OutOfMemoryError, type EngineOptions } from '../../native/index.js';
import { openJobEngine } from '../../worker/job-engine.js';
import type { KmeansCheckpoint, SumsPlan } from '../../core/kmeans/types.js';

const options: EngineOptions = { rows: 50_000, dims: 8, k: 4, metric: 'l2', dtype: 'f32', backend: 'auto', threads: 1 };
const checkpoint = (sumsPlan?: SumsPlan): KmeansCheckpoint => ({
  version: 1, iteration: 1, k: 4, dims: 8, rows: 50_000, metric: 'l2', initMethod: 'random', centroids: new Float32Array(32),
  previousCentroids: new Float32Array(32), history: [], dataVariance: 1, ...(sumsPlan ? { sumsPlan } : {}),
});

async function open(o: Partial<EngineOptions>, resume: KmeansCheckpoint | undefined, fits = true) {
  const lines: { level: number; msg: string }[] = [];
  const log = pino({ level: 'info' }, { write: (l: string) => { lines.push(JSON.parse(l) as { level: number; msg: string }); } });
  const asked: EngineOptions[] = [];
  const engine = await openJobEngine(async (x) => {
    asked.push(x);
    // a device too small for the recorded chunk, as the CUDA planner reports it (cuda/planner.cpp)
    if (!fits && x.chunkRows !== undefined) throw new OutOfMemoryError(`CUDA: ... to stream chunks of ${x.chunkRows} rows, but the device has 1 MiB free`);
    return Engine.open(x);
  }, { ...options, ...o }, resume, log);
  const chunkRows = engine.plan.chunkRows;
  engine.close();
  return { chunkRows, asked: asked.map((x) => x.chunkRows), warned: lines.filter((l) => l.level === 40).map((l) => l.msg) };
}

describe('openJobEngine', () => {
  it('opens a GPU checkpoint\'s resume with its chunk rows', async () => {
    const r = await open({}, checkpoint({ backend: 'cuda', chunkRows: 3000 }));
    expect(r.chunkRows).toBe(3000);
    expect(r.asked).toEqual([3000]);
    // this machine runs it on the CPU: said, since the bits then differ anyway
    expect(r.warned).toEqual(['resumed on another backend: the result may differ from an uninterrupted run in the last bits']);
  });

  it('pins nothing for a fresh run, a CPU checkpoint, an older checkpoint without a plan, or a job sent to the CPU', async () => {
    const auto = (await open({}, undefined)).chunkRows;
    expect(auto).not.toBe(3000);
    for (const [o, resume] of [
      [{}, checkpoint({ backend: 'cpu', chunkRows: 3000 })],
      [{}, checkpoint()],
      [{ backend: 'cpu' as const }, checkpoint({ backend: 'cuda', chunkRows: 3000 })],
    ] as const) {
      const r = await open(o, resume);
      expect(r).toEqual({ chunkRows: auto, asked: [undefined], warned: [] });
    }
  });

  it('keeps a configured chunk (KMFLEET_CHUNK_ROWS) and warns when it is not the checkpoint\'s', async () => {
    expect(await open({ chunkRows: 3000 }, checkpoint({ backend: 'cuda', chunkRows: 3000 }))).toEqual({ chunkRows: 3000, asked: [3000], warned: [] });
    const r = await open({ chunkRows: 2000 }, checkpoint({ backend: 'cuda', chunkRows: 3000 }));
    expect(r.chunkRows).toBe(2000);
    expect(r.warned).toEqual(['configured chunk rows differ from the checkpoint\'s: the result may differ from an uninterrupted run in the last bits']);
  });

  it('plans anew, and says so, when the device cannot take the recorded chunk', async () => {
    const r = await open({}, checkpoint({ backend: 'cuda', chunkRows: 3000 }), false);
    expect(r.asked).toEqual([3000, undefined]);
    expect(r.chunkRows).not.toBe(3000);
    expect(r.warned).toEqual(['the checkpoint\'s chunk rows do not fit this device: planning anew, the result may differ from an uninterrupted run in the last bits']);
  });

  it('passes other errors on', async () => {
    await expect(openJobEngine(() => Promise.reject(new Error('boom')), options, checkpoint({ backend: 'cuda', chunkRows: 3000 }), pino({ level: 'silent' }))).rejects.toThrow('boom');
  });
});
