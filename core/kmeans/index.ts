/** The Lloyd driver shared by `kmfleet fit` and the queue worker. */
export { checkSpec, runKmeans, type RunKmeansOptions } from './driver.js';
export { checkCheckpoint, decodeCheckpoint, encodeCheckpoint } from './checkpoint.js';
export { KmeansAbortedError, KmeansSpecError } from './errors.js';
export { checkGivenCentroids, kmeansPlusPlusSampleSize, readInitRows, readRowsAsF32, type InitOptions, type InitRows } from './init.js';
export { writeCentroids, writeDistances, writeLabels } from './outputs.js';
export { runPass, type PassOptions } from './pass-runner.js';
export { distinctIndices, Rng } from './prng.js';
export { gatherRows, type GatherOptions } from './row-gather.js';
export { stopReason } from './stopping.js';
export { tierSummary, type FedFrom, type PassTierSummary, type TierSummary } from './tier-summary.js';
export type {
  InitMethod,
  IterationReport,
  KmeansCheckpoint,
  KmeansEngine,
  KmeansLogger,
  KmeansResult,
  KmeansSpec,
  KmeansTimings,
  PassRows,
  RunTiers,
  StopReason,
} from './types.js';
