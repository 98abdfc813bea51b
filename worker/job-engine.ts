/**
 * Opening a job's engine so that a resumed job ends with the same bits as an uninterrupted one.
 *
 * On the CUDA backend some results' last bits still depend on the chunk rows (docs/DESIGN.md, Numerics): an assign
 * pass's inertia and distances (the final pass's are the job's result), and the fit passes of shapes too large for the
 * exact statistics. The planner's automatic chunk depends on the device's free memory and on how many rows stay
 * resident, which can differ on the pod that resumes. A checkpoint therefore records the plan its sums were added
 * under (KmeansCheckpoint.sumsPlan) and a resume opens the engine with the same chunk rows. The CPU backend's results
 * do not depend on chunking, so a CPU checkpoint pins nothing.
 */
import { OutOfMemoryError, type Engine, type EngineOptions } from '../native/index.js';
import type { KmeansCheckpoint } from '../core/index.js';
import type { Logger } from './logger.js';

export type OpenEngine = (options: EngineOptions) => Promise<Engine>;

export async function openJobEngine(open: OpenEngine, options: EngineOptions, resume: KmeansCheckpoint | undefined, log: Logger): Promise<Engine> {
  const recorded = resume?.sumsPlan;
  if (recorded?.backend !== 'cuda' || options.backend === 'cpu') return open(options);
  if (options.chunkRows !== undefined) {
    // KMFLEET_CHUNK_ROWS is the operator's word; say what it costs
    if (options.chunkRows !== recorded.chunkRows)
      log.warn({ chunkRows: options.chunkRows, checkpointChunkRows: recorded.chunkRows }, 'configured chunk rows differ from the checkpoint\'s: the result may differ from an uninterrupted run in the last bits');
    return open(options);
  }
  let engine: Engine;
  try {
    engine = await open({ ...options, chunkRows: recorded.chunkRows });
  } catch (err) {
    if (!(err instanceof OutOfMemoryError)) throw err;
    log.warn({ err, checkpointChunkRows: recorded.chunkRows }, 'the checkpoint\'s chunk rows do not fit this device: planning anew, the result may differ from an uninterrupted run in the last bits');
    return open(options);
  }
  if (engine.plan.backend !== recorded.backend)
    log.warn({ backend: engine.plan.backend, checkpointBackend: recorded.backend }, 'resumed on another backend: the result may differ from an uninterrupted run in the last bits');
  else log.info({ chunkRows: recorded.chunkRows }, 'resume keeps the checkpoint\'s chunk rows');
  return engine;
}
