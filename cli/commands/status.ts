/**
 * `kmfleet status JOBID`: state, spec, progress, result or failure of one job. The formatters here are shared
 * with wait, enqueue --wait and history.
 */
import type { JobInfo } from '../../producer/client.js';
import type { JobProgress } from '../../producer/progress.js';
import type { JobResult } from '../../producer/results.js';
import type { JobSpec } from '../../producer/spec.js';
import type { ConnectionFlags } from '../options.js';
import { formatDuration } from '../progress.js';
import { cliAction, CommandFailure, printJson, withClient } from './connection.js';

export { formatDuration };

export const action = cliAction(async (jobId: string, flags: ConnectionFlags) => {
  const info = await withClient(flags, (c) => c.get(jobId));
  if (!info) throw new CommandFailure(`job ${jobId} not found (never enqueued, removed, or expired)`);
  if (flags.json) printJson(info);
  else process.stdout.write(formatInfo(info));
});

const sci = (x: number | null) => (x === null ? '?' : Math.abs(x) >= 1e5 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : x.toPrecision(6));
const iso = (ms: number | null) => (ms ? new Date(ms).toISOString() : '-');

/**
 * "iterating · iteration 12/300 · inertia 1.234e+5 · reassigned 3.21% · ETA 1m20s" (short: "12/300 · inertia ...");
 * `eta` false for a job that will not go on (failed, cancelled): its last report's ETA means nothing any more.
 */
export function formatProgress(p: JobProgress | null, short = false, eta = true): string {
  if (!p) return 'no progress reported yet';
  const parts = short ? [`${p.iteration}/${p.maxIter}`] : [`${p.phase}`, `iteration ${p.iteration}/${p.maxIter}`];
  if (p.inertia !== null) parts.push(`inertia ${sci(p.inertia)}`);
  if (p.reassignedFraction !== null) parts.push(`reassigned ${(p.reassignedFraction * 100).toFixed(2)}%`);
  else if (p.reassigned !== null) parts.push(`reassigned ${p.reassigned}`);
  if (eta && p.etaMs !== null) parts.push(`ETA ${formatDuration(p.etaMs)}`);
  return parts.join(' · ');
}

export function formatSpec(s: JobSpec): string {
  const ds = `${s.dataset.uri} (${s.dataset.format}${s.dataset.dims ? `, ${s.dataset.dims} dims` : ''})`;
  return `k=${s.k} metric=${s.metric} init=${s.init} maxIter=${s.maxIter} precision=${s.precision}${s.name ? ` name=${s.name}` : ''}\n` +
    `  dataset   ${ds}\n  output    ${s.output}`;
}

export function formatResult(r: JobResult): string {
  const how = r.converged ? `converged (${r.stopReason})` : `stopped at maxIter`;
  return (
    `  result    ${r.iterations} iterations, ${how}; inertia ${sci(r.inertia)}; ${r.backend} ${r.device} ${r.precision}; ${formatDuration(r.timings.totalMs)}\n` +
    `  centroids ${r.outputs.centroids}\n  labels    ${r.outputs.assignments}\n`
  );
}

export function formatInfo(info: JobInfo): string {
  const lines = [`job ${info.id}: ${info.state}${info.attemptsMade ? ` (attempts ${info.attemptsMade})` : ''}`];
  if (info.spec) lines.push(`  spec      ${formatSpec(info.spec)}`);
  if (info.scheduler) lines.push(`  schedule  ${info.scheduler}`);
  const goesOn = info.state !== 'failed' && !info.cancelRequested;
  if (info.state !== 'completed') lines.push(`  progress  ${formatProgress(info.progress, false, goesOn)}`);
  lines.push(`  created   ${iso(info.timestamps.createdAt)}  started ${iso(info.timestamps.startedAt)}  finished ${iso(info.timestamps.finishedAt)}`);
  if (info.cancelRequested && info.state !== 'completed') lines.push(`  cancel    requested (${info.cancelRequested})`);
  if (info.failedReason) lines.push(`  failed    ${info.failedReason}`);
  let out = lines.join('\n') + '\n';
  if (info.result) out += formatResult(info.result);
  return out;
}
