// Shared by the GPU test files: open engines (closed after each file), draw distinct rows, run fit passes.
import { afterAll } from 'vitest';

import { Engine, type EngineOptions, type PassResult } from '../../native/index.js';
import { Rng, runPass } from '../helpers/reference.js';

// KMFLEET_TEST_SMEM_LIMIT (scripts/gpu-run OUT portable LIMIT): every engine these files open plans the portable
// kernel for that much shared memory per block (CudaOptions.sharedMemoryLimit), as on a smaller GPU.
const smemLimit = Number(process.env.KMFLEET_TEST_SMEM_LIMIT ?? 0);

export function engineTracker(): (o: Partial<EngineOptions> & Pick<EngineOptions, 'rows' | 'dims' | 'k'>) => Promise<Engine> {
  const engines: Engine[] = [];
  afterAll(() => engines.forEach((e) => e.close()));
  return async (o) => {
    const cuda = smemLimit > 0 ? { sharedMemoryLimit: smemLimit, ...o.cuda } : o.cuda;
    const e = await Engine.open({ metric: 'l2', dtype: 'f32', backend: 'cuda', ...o, ...(cuda ? { cuda } : {}) });
    engines.push(e);
    return e;
  };
}

export function distinctRows(n: number, k: number, seed: number): number[] {
  const rng = new Rng(seed);
  const all = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    [all[i], all[j]] = [all[j], all[i]];
  }
  return all.slice(0, k);
}

/** `passes` fit passes as the driver runs them (resident rows skipped after the first); the last result. */
export async function fit(e: Engine, data: Uint8Array, n: number, passes: number): Promise<PassResult[]> {
  const out: PassResult[] = [];
  for (let p = 0; p < passes; p++) {
    out.push(await runPass<PassResult>(e, data, n, 'fit', { skipBelow: p === 0 ? 0 : e.plan.residentRows }));
  }
  return out;
}
