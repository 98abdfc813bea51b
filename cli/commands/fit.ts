/**
 * `kmfleet fit`: k-means on a local file with the embedded engine, no Redis, no S3 (DESIGN.md: steps 1–5 of a job).
 * Outputs go to temporary names and are renamed into place; summary.json comes last and is the commit point, so a
 * directory never shows a summary next to half-written or stale outputs.
 */
import { readFile, rename, rm, mkdir, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { BackendChoice, GpuInfo, Metric, Precision } from '../../native/index.js';
import { iterationsLeft } from '../../producer/progress.js';
import { chooseGpus, keptDatasetBytes, parseGpus, type GpuCount, formatByteSize, parseByteSize, tierSummary, LocalFileSource, type DatasetFormat, decodeNpy, NpyWriter, type NpyWriteResult, checkSpec, runKmeans, KmeansSpecError, readInitRows, writeCentroids, writeDistances, writeLabels, type IterationReport, type KmeansCheckpoint, type KmeansResult, type KmeansSpec } from '../../core/index.js';
import { formatDuration, humanCount, ProgressLine } from '../progress.js';

interface FitOptions {
  input: string;
  k?: number;
  metric: Metric;
  init: string;
  maxIter: number;
  tol: number;
  tolReassign: number;
  seed: number;
  precision: Precision;
  backend: BackendChoice;
  format?: DatasetFormat;
  dims?: number;
  convert?: 'f64-to-f32';
  member?: string;
  column?: string;
  chunkRows?: number;
  threads?: number;
  gpuMemory?: string;
  hostMemory?: string;
  gpus?: string;
  distances?: boolean;
  out: string;
  json?: boolean;
}

/** `kmfleet fit`: options as defined in cli/commands/index.ts. */
export async function action(opts: FitOptions): Promise<void> {
  const summary = await fit(opts);
  if (opts.json) process.stdout.write(JSON.stringify(summary) + '\n');
  else process.stdout.write(humanSummary(summary));
}

async function loadInitCentroids(path: string, k: number | undefined, dims: number): Promise<Float32Array> {
  const npy = decodeNpy(await readFile(path));
  if (npy.shape.length !== 2 || npy.shape[1] !== dims || (k !== undefined && npy.shape[0] !== k)) {
    throw new KmeansSpecError(`--init ${path} has shape (${npy.shape.join(', ')}); expected (${k ?? 'k'}, ${dims})`);
  }
  if (npy.data instanceof Float32Array) return npy.data;
  if (npy.data instanceof Float64Array) return Float32Array.from(npy.data);
  throw new KmeansSpecError(`--init ${path} holds ${npy.descr} values; expected float32, float16 or float64`);
}

export async function fit(opts: FitOptions): Promise<Record<string, unknown>> {
  const started = Date.now();
  // fail before the work, not after it
  const outStat = await stat(resolve(opts.out)).catch(() => undefined);
  if (outStat && !outStat.isDirectory()) {
    throw Object.assign(new Error(`--out ${opts.out} exists and is not a directory`), { code: 'ENOTDIR' });
  }
  const source = await LocalFileSource.open(opts.input, { format: opts.format, dims: opts.dims, convert: opts.convert, member: opts.member, column: opts.column }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'ENOENT') throw err;
    throw Object.assign(new Error(`--input ${opts.input}: no such file`), { code: err.code });
  });
  const progress = new ProgressLine({ json: opts.json });
  try {
    let init: KmeansSpec['init'];
    let k = opts.k;
    if (opts.init === 'kmeans++' || opts.init === 'random') {
      init = opts.init;
    } else {
      init = await loadInitCentroids(opts.init, k, source.dims);
      k ??= init.length / source.dims;
    }
    if (k === undefined) throw new KmeansSpecError('--k is required (or give --init centroids.npy)');
    const spec: KmeansSpec = {
      k, metric: opts.metric, init, maxIter: opts.maxIter, tol: opts.tol, tolReassign: opts.tolReassign, seed: opts.seed,
      distances: opts.distances === true,
    };
    checkSpec(spec, source.rows);
    const gpus = opts.gpus === undefined ? 1 : parseGpus(opts.gpus, '--gpus');
    const budgets = {
      gpu: opts.gpuMemory === undefined ? undefined : sizeOption(opts.gpuMemory, '--gpu-memory'),
      host: opts.hostMemory === undefined ? undefined : sizeOption(opts.hostMemory, '--host-memory'),
    };

    // the init's rows (k-means++'s sample) are read while the engine opens (~20 ms on CUDA)
    const initRows = readInitRows(source, spec);
    initRows.catch(() => {}); // awaited by runKmeans; a failure before that is the open's
    // loaded here, not at the top: bad input is reported even where the addon is not built
    const { Engine, gpuInfo } = await import('../../native/index.js');
    const engine = await Engine.open({
      rows: source.rows, dims: source.dims, k, metric: spec.metric, dtype: source.dtype,
      backend: opts.backend, precision: opts.precision, chunkRows: opts.chunkRows, threads: opts.threads,
      ...deviceBudget(budgets.gpu), hostMemoryBudget: budgets.host,
      ...(gpus !== 1 && opts.backend !== 'cpu' ? devicesFor(gpus, gpuInfo(), keptDatasetBytes(source, opts.precision)) : {}),
    });
    const ac = new AbortController();
    const onSigint = () => ac.abort(new Error('interrupted'));
    process.once('SIGINT', onSigint);
    try {
      const onIteration = (r: IterationReport, cp: KmeansCheckpoint) => {
        const recent = cp.history.slice(-5);
        const msPerIteration = recent.reduce((sum, h) => sum + h.ms, 0) / recent.length;
        const left = iterationsLeft(
          { history: cp.history, shiftStop: spec.tol * cp.dataVariance, reassignedStop: spec.tolReassign, rows: source.rows },
          r.iteration, spec.maxIter,
        );
        const etaMs = Math.round((left + 1) * msPerIteration); // + the assign pass
        progress.update(
          `iter ${r.iteration}/${spec.maxIter}  inertia ${r.inertia.toPrecision(7)}  reassigned ${(100 * r.reassignedFraction).toFixed(3)}%` +
            `  shift ${r.shift.toExponential(2)}${r.settledFraction ? `  settled ${(100 * r.settledFraction).toFixed(1)}%` : ''}` +
            `  ${humanCount(source.rows / (r.ms / 1000))} rows/s  eta ${formatDuration(etaMs)}`,
          { event: 'iteration', ...r, etaMs },
        );
      };
      // its own line: the progress line that follows rewrites itself, not this
      if (!opts.json) process.stderr.write(`fit ${source.describe()}  k=${k}  ${engine.plan.backend}: ${engine.plan.device}, ${engine.plan.precision}${tierLine(engine.plan, source)}\n`);
      const result = await runKmeans({ engine, source, spec, initRows, onIteration, signal: ac.signal });
      progress.done();
      if (result.tiers.hostTierWarning && !opts.json) process.stderr.write(`kmfleet: warning: ${result.tiers.hostTierWarning}\n`);
      return await writeOutputs(opts, source, spec, result, engine, started);
    } finally {
      process.removeListener('SIGINT', onSigint);
      engine.close();
    }
  } finally {
    progress.done();
    await source.close();
  }
}

type FittedEngine = Parameters<typeof writeLabels>[0] & Parameters<typeof writeDistances>[0] & { plan: { backend: string; device: string; precision: string; chunkRows: number; buffers: number; residentRows: number; hostRows: number } };

/** --gpus as engine options: the devices of the job, when it takes more than one. */
function devicesFor(gpus: GpuCount, info: GpuInfo, datasetBytes: number): { devices?: number[] } {
  const chosen = chooseGpus(gpus, info.devices, datasetBytes).map((d) => d.ordinal);
  return chosen.length > 1 ? { devices: chosen } : {};
}

/** --gpu-memory as engine options: a cap on all the device memory the job takes; 0 keeps no rows on the device. */
function deviceBudget(bytes: number | undefined): { memoryBudget?: number; deviceMemory?: number } {
  if (bytes === undefined) return {};
  return bytes === 0 ? { memoryBudget: 0 } : { memoryBudget: bytes, deviceMemory: bytes };
}

/** A size option's bytes, or the CLI's bad-input error naming the option. */
function sizeOption(text: string, option: string): number {
  try {
    return parseByteSize(text, option);
  } catch (err) {
    throw new KmeansSpecError((err as Error).message);
  }
}

/** Where the rows stay between passes, when not all of them stay on the device: for the header line. */
function tierLine(plan: FittedEngine['plan'], source: LocalFileSource): string {
  const fed = source.rows - plan.residentRows - plan.hostRows;
  if (plan.residentRows >= source.rows) return '';
  const where = plan.backend === 'cuda' ? 'on the GPU' : 'resident';
  return `\n  rows: ${humanCount(plan.residentRows)} ${where}, ${humanCount(plan.hostRows)} in host memory (${formatByteSize(plan.hostRows * source.rowBytes)})` +
    (fed > 0 ? `, ${humanCount(fed)} read from ${source.path} every pass` : '');
}

async function writeOutputs(
  opts: FitOptions, source: LocalFileSource, spec: KmeansSpec, result: KmeansResult, engine: FittedEngine, started: number,
): Promise<Record<string, unknown>> {
  const dir = resolve(opts.out);
  await mkdir(dir, { recursive: true });
  const tmp = (name: string) => join(dir, `.${name}.${process.pid}.tmp`);
  const files: [string, () => Promise<NpyWriteResult>][] = [
    ['centroids.npy', () => writeCentroids(result.centroids, spec.k, source.dims, NpyWriter.toFile(tmp('centroids.npy'), '<f4', [spec.k, source.dims]))],
    ['assignments.npy', () => writeLabels(engine, source.rows, NpyWriter.toFile(tmp('assignments.npy'), '<i4', [source.rows]))],
  ];
  if (spec.distances) files.push(['distances.npy', () => writeDistances(engine, source.rows, NpyWriter.toFile(tmp('distances.npy'), '<f4', [source.rows]))]);
  const outputs: Record<string, unknown> = {};
  try {
    for (const [name, write] of files) {
      const r = await write();
      outputs[name.replace('.npy', '')] = { file: name, bytes: r.bytes, sha256: r.sha256 };
    }
    const input = await stat(source.path);
    const { init, distances, ...specRest } = spec;
    const summary = {
      kmfleet: 'fit',
      spec: { ...specRest, init: init instanceof Float32Array ? { file: resolve(opts.init) } : init, precision: opts.precision, backend: opts.backend, chunkRows: opts.chunkRows ?? null, distances: distances ?? false },
      input: { path: resolve(source.path), format: source.format, ...(source.member ? { member: source.member } : {}), ...(source.column ? { column: source.column } : {}), dtype: source.dtype, ...(source.convert ? { convert: source.convert } : {}), bytes: input.size, mtime: input.mtime.toISOString() },
      rows: source.rows,
      dims: source.dims,
      k: spec.k,
      iterations: result.iterations,
      converged: result.converged,
      stopReason: result.stopReason,
      inertia: result.inertia,
      history: result.history,
      emptyReseeded: result.emptyReseeded,
      initMethod: result.initMethod,
      dataVariance: Number.isFinite(result.dataVariance) ? result.dataVariance : null,
      clusterSizes: { min: result.counts.reduce((a, b) => Math.min(a, b), Infinity), max: result.counts.reduce((a, b) => Math.max(a, b), 0) },
      backend: engine.plan.backend,
      device: engine.plan.device,
      precision: engine.plan.precision,
      plan: { chunkRows: engine.plan.chunkRows, buffers: engine.plan.buffers, residentRows: engine.plan.residentRows, hostRows: engine.plan.hostRows },
      tiers: tierSummary(result.tiers, source.rowBytes, 'file'),
      timings: { ...roundMs(result.timings), totalMs: Date.now() - started },
      outputs,
      createdAt: new Date().toISOString(),
    };
    // commit: the old summary goes first (its outputs are about to change), the new one last
    await rm(join(dir, 'summary.json'), { force: true });
    for (const [name] of files) await rename(tmp(name), join(dir, name));
    await writeJsonAtomic(join(dir, 'summary.json'), tmp('summary.json'), summary);
    return { ...summary, outDir: dir };
  } catch (err) {
    for (const [name] of files) await rm(tmp(name), { force: true });
    throw err;
  }
}

async function writeJsonAtomic(path: string, tmpPath: string, value: unknown): Promise<void> {
  const { writeFile, open } = await import('node:fs/promises');
  await writeFile(tmpPath, JSON.stringify(value, null, 2) + '\n');
  const fh = await open(tmpPath, 'r+');
  await fh.sync();
  await fh.close();
  await rename(tmpPath, path);
}

function roundMs(t: KmeansResult['timings']): Record<string, number> {
  return Object.fromEntries(Object.entries(t).map(([k, v]) => [k, Math.round(v * 10) / 10]));
}

function humanSummary(s: Record<string, any>): string {
  const secs = (s.timings.totalMs / 1000).toFixed(1);
  return [
    `kmfleet fit: ${s.rows} rows × ${s.dims} dims, k=${s.k} (${s.spec.metric}, ${s.initMethod}), ${s.iterations} iterations, ` +
      `${s.converged ? `converged (${s.stopReason})` : 'not converged (maxIter)'}, inertia ${Number(s.inertia).toPrecision(7)}`,
    `  ${s.backend}: ${s.device} · ${s.precision} · ${secs} s · empty clusters re-seeded: ${s.emptyReseeded}`,
    ...Object.values(s.outputs as Record<string, { file: string }>).map((o) => `  ${o.file.padEnd(16)} ${join(s.outDir, o.file)}`),
    `  ${'summary.json'.padEnd(16)} ${join(s.outDir, 'summary.json')}`,
    '',
  ].join('\n');
}

