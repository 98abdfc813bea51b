#!/usr/bin/env node
/**
 * One job across the GPUs of a machine, through the product: `kmfleet fit --gpus 1` and `--gpus N` on the same data and
 * init, one run after the other on one machine — out of core (`--gpu-memory 0`: every row in the host tiers, streamed
 * each pass over each device's own link) and in core (each device holds its share) — with the speed-up, whether the
 * centroids and labels are the same bits, and what the split costs a pass (the statistics' merge on the first device
 * and the centroids' hand-over to the others, from the engine's diagnostics, KMFLEET_ENGINE_STATS).
 *
 *   node bench/multigpu/run.mjs OUTDIR [--gpus 2] [--iters 8] [--only ooc16|ooc67|core40] [--work DIR] [--kmbench PATH]
 *
 * With kmbench (default .device/kmbench, when it is there), the host-tier cases also print their bound: the pinned
 * H2D bandwidth of one device, and of every device's link at once (`kmbench h2d`, `kmbench h2d all`).
 *
 * Cases (issue 28's): ooc16: 16.8M×128 fp32, k=4096; ooc67: 67M×128 fp32, k=8192; core40: 40M×128, k=4096, exact fp32
 * and fp16. Needs dist/ and the addon (KMFLEET_ADDON). Datasets (standard normal float32 .npy, numpy) are kept in the
 * work folder. Per-iteration times are the medians of iteration 3 on, from each summary.json; each fit's stderr (the
 * engine's per-pass and per-lane diagnostics) is kept as OUTDIR/NAME.stats.log.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

import { median, normalNpy, run } from '../lib/fit-runs.mjs';

const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    gpus: { type: 'string', default: '2' },
    iters: { type: 'string', default: '8' },
    only: { type: 'string', multiple: true },
    work: { type: 'string' },
    kmbench: { type: 'string', default: new URL('../../.device/kmbench', import.meta.url).pathname },
  },
});
const out = resolve(positionals[0] ?? 'multigpu-out');
const work = resolve(a.work ?? join(out, 'work'));
mkdirSync(out, { recursive: true });
mkdirSync(work, { recursive: true });
const iters = Number(a.iters), gpus = a.gpus;
const log = (m) => console.error(`[multigpu ${new Date().toISOString().slice(11, 19)}] ${m}`);

function fit(name, data, k, extra) {
  log(`fit ${name}: ${extra.join(' ')}`);
  const dir = join(work, `fit-${name}`);
  const r = run(process.execPath, ['bin/kmfleet.js', 'fit', '--input', data, '--k', String(k), '--init', 'random', '--max-iter', String(iters),
    '--tol', '0', '--seed', '1', '--backend', 'cuda', '--out', dir, '--json', ...extra], { KMFLEET_ENGINE_STATS: '1' });
  const s = JSON.parse(r.stdout.trim().split('\n').at(-1));
  writeFileSync(join(out, `${name}.stats.log`), r.stderr);  // the engine's per-pass diagnostics, for where time went
  const merges = [...r.stderr.matchAll(/\[kmfleet devices\] lanes=\d+ merge=([\d.]+) ms \(device\) broadcast=([\d.]+) ms/g)];
  return {
    name, args: extra.join(' '), device: s.device, precision: s.precision,
    msPerIteration: median(s.history.slice(2).map((h) => h.ms)),
    centroids: s.outputs.centroids.sha256, labels: s.outputs.assignments.sha256, inertia: s.inertia,
    mergeMs: merges.length ? median(merges.slice(2).map((m) => Number(m[1]))) : null,
    broadcastMs: merges.length ? median(merges.slice(2).map((m) => Number(m[2]))) : null,
  };
}

const cases = [
  { id: 'ooc16', rows: 16_800_000, dims: 128, k: 4096, precisions: ['fp32'], extra: ['--gpu-memory', '0'] },
  { id: 'core40', rows: 40_000_000, dims: 128, k: 4096, precisions: ['fp32', 'fp16'], extra: [] },
  { id: 'ooc67', rows: 67_000_000, dims: 128, k: 8192, precisions: ['fp32'], extra: ['--gpu-memory', '0'] },
].filter((c) => !a.only || a.only.includes(c.id));

/** GB/s of one device's link and of all devices' at once; undefined without kmbench */
function links() {
  if (!existsSync(a.kmbench)) return undefined;
  const one = Number(/RESULT_H2D gbps=([\d.]+)/.exec(run(a.kmbench, ['h2d']).stdout)?.[1]);
  const all = Number(/RESULT_H2D_ALL devices=\d+ gbps=([\d.]+)/.exec(run(a.kmbench, ['h2d', 'all']).stdout)?.[1]);
  return { one, all };
}
const h2d = links();
if (h2d) log(`pinned H2D: ${h2d.one} GB/s one device, ${h2d.all} GB/s all at once`);

const results = [];
for (const c of cases) {
  const data = normalNpy(join(work, `normal-${c.rows}x${c.dims}.npy`), c.rows, c.dims, log);
  for (const precision of c.precisions) {
    const args = [...c.extra, '--precision', precision];
    const one = fit(`${c.id}-${precision}-1`, data, c.k, [...args, '--gpus', '1']);
    const many = fit(`${c.id}-${precision}-${gpus}`, data, c.k, [...args, '--gpus', gpus]);
    const bytes = c.rows * c.dims * 4;
    const bound = c.extra.includes('--gpu-memory') && h2d
      ? { oneMs: bytes / (h2d.one * 1e6), manyMs: bytes / (h2d.all * 1e6), h2d } : undefined;
    results.push({
      case: c.id, rows: c.rows, dims: c.dims, k: c.k, precision, one, many, linkBound: bound,
      speedup: one.msPerIteration / many.msPerIteration,
      sameBits: one.centroids === many.centroids && one.labels === many.labels && one.inertia === many.inertia,
    });
  }
}
writeFileSync(join(out, 'multigpu.json'), JSON.stringify(results, null, 2));
const linkCell = (r, side) => (r.linkBound ? ` (link ${r.linkBound[side].toFixed(1)})` : '');
const table = [
  '| case | precision | 1 GPU ms/iter | N GPUs ms/iter | speed-up | merge ms (device) | hand-over ms (host) | same bits |',
  '|---|---|---|---|---|---|---|---|',
  ...results.map((r) => `| ${r.rows / 1e6}M×${r.dims}, k=${r.k}${r.case.startsWith('ooc') ? ', host tier' : ', in core'} | ${r.precision} | ` +
    `${r.one.msPerIteration.toFixed(1)}${linkCell(r, 'oneMs')} | ${r.many.msPerIteration.toFixed(1)}${linkCell(r, 'manyMs')} (${r.many.device}) | ${r.speedup.toFixed(2)}× | ` +
    `${r.many.mergeMs?.toFixed(2) ?? '—'} | ${r.many.broadcastMs?.toFixed(2) ?? '—'} | ${r.sameBits ? 'yes' : 'NO'} |`),
].join('\n');
writeFileSync(join(out, 'multigpu.md'), table + '\n');
console.log(JSON.stringify(results, null, 2));
console.log(table);
