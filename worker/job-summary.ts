/**
 * What a completed job reports: the JobResult (producer/results.ts: BullMQ return value and model history entry) and
 * summary.json, which is the JobResult plus what a reader of the outputs wants next to them.
 */
import type { EnginePlan } from '../native/index.js';
import type { JobResult } from '../producer/results.js';
import type { JobSpec } from '../producer/spec.js';
import { tierSummary, type FedFrom, type IterationReport, type KmeansResult, type TierSummary } from '../core/index.js';
import type { OutputWriter } from './outputs/writer.js';

export interface JobSummary extends JobResult {
  formatVersion: 1;
  history: IterationReport[];
  clusterSizes: number[];
  attempt: number;
  /** where the rows of the passes came from: device, host tier, and the fed rows' source, in rows and bytes per pass */
  tiers: TierSummary;
}

export interface JobFacts {
  jobId: string;
  attempt: number;
  spec: JobSpec;
  specHash: string;
  dataset: { etag: string; rows: number; dims: number };
  plan: Pick<EnginePlan, 'backend' | 'device' | 'precision'>;
  result: KmeansResult;
  outputs: OutputWriter;
  distances: boolean;
  /** worker-side timings, rounded into the result */
  timings: Record<string, number>;
  resumedFromGeneration?: number;
  initFrom?: string;
  startedAt: number;
  finishedAt: number;
}

export function buildJobResult(f: JobFacts): JobResult {
  const { spec, result, outputs } = f;
  const k = result.timings;
  return {
    jobId: f.jobId,
    ...(spec.name ? { name: spec.name } : {}),
    spec,
    specHash: f.specHash,
    dataset: { uri: spec.dataset.uri, etag: f.dataset.etag, format: spec.dataset.format, rows: f.dataset.rows, dims: f.dataset.dims },
    k: spec.k,
    iterations: result.iterations,
    converged: result.converged,
    stopReason: result.stopReason,
    inertia: result.inertia,
    emptyClustersReseeded: result.emptyReseeded,
    backend: f.plan.backend,
    device: f.plan.device,
    precision: f.plan.precision,
    outputs: {
      prefix: outputs.prefix,
      centroids: outputs.uriOf('centroids.npy'),
      assignments: outputs.uriOf('assignments.npy'),
      ...(f.distances ? { distances: outputs.uriOf('distances.npy') } : {}),
      summary: outputs.uriOf('summary.json'),
    },
    // by name: the files are uploaded together, so the order they finished in varies
    checksums: Object.fromEntries(Object.entries(outputs.files).sort(([a], [b]) => (a < b ? -1 : 1)).map(([name, file]) => [name, `sha256:${file.sha256}`])),
    timings: {
      totalMs: Math.round(f.timings.totalMs),
      initMs: Math.round(k.initMs),
      resumeMs: Math.round(k.resumeMs),
      iterateMs: Math.round(k.iterateMs),
      assignMs: Math.round(k.assignMs),
      readMs: Math.round(k.readMs),
      ...Object.fromEntries(Object.entries(f.timings).filter(([n]) => n !== 'totalMs').map(([n, v]) => [n, Math.round(v)])),
    },
    ...(result.resumedFrom !== undefined ? { resumedFrom: { iteration: result.resumedFrom, generation: f.resumedFromGeneration ?? 0 } } : {}),
    ...(f.initFrom ? { initFrom: f.initFrom } : {}),
    startedAt: f.startedAt,
    finishedAt: f.finishedAt,
  };
}

export function buildSummary(jobResult: JobResult, result: KmeansResult, attempt: number, rowBytes: number, fedFrom: FedFrom): JobSummary {
  return {
    formatVersion: 1, ...jobResult, history: result.history, clusterSizes: Array.from(result.counts), attempt,
    tiers: tierSummary(result.tiers, rowBytes, fedFrom),
  };
}
