#!/usr/bin/env node
/**
 * Data bigger than the GPU, through the product: `kmfleet fit` on one dataset with the rows in each tier — all on the
 * device, some on the device and the rest in the host tier, all in the host tier, none held (read from the file every
 * pass: the disk tier) — each beside its bound measured in the same run: max(the all-resident pass in its precision, the streamed bytes
 * ÷ the pinned H2D bandwidth) for the host tier, and a plain parallel reader of the same file for the disk tier.
 *
 *   node bench/tiers/run.mjs OUTDIR [--rows 16800000] [--dims 128] [--k 4096] [--iters 8] [--kmbench PATH]
 *     [--work DIR]   (the dataset and the fits' outputs: large; default OUTDIR/work)
 *
 * Needs dist/ (npm run build:ts), the addon (KMFLEET_ADDON) and, for the H2D bandwidth, kmbench (`kmbench h2d`).
 * The dataset (standard normal float32 .npy) is made by numpy when python3 has it, else by `kmfleet generate`; it is
 * kept in the work folder between runs. Per-iteration times are the medians of iteration 3 on, from each summary.json.
 * Prints one JSON report and a markdown table (also written to OUTDIR/tiers.md).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

import { median, normalNpy, run } from '../lib/fit-runs.mjs';

const ROOT = new URL('../..', import.meta.url).pathname;
const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    rows: { type: 'string', default: '16800000' },
    dims: { type: 'string', default: '128' },
    k: { type: 'string', default: '4096' },
    iters: { type: 'string', default: '8' },
    kmbench: { type: 'string', default: join(ROOT, '.device/kmbench') },
    // the rows kept on the device in the partly resident run, as a GPU memory budget
    'gpu-memory': { type: 'string', default: '4G' },
    work: { type: 'string' },
  },
});
const out = resolve(positionals[0] ?? 'tiers-out');
const rows = Number(a.rows), dims = Number(a.dims), k = Number(a.k), iters = Number(a.iters);
const work = resolve(a.work ?? join(out, 'work'));
mkdirSync(out, { recursive: true });
mkdirSync(work, { recursive: true });
const data = join(work, `normal-${rows}x${dims}.npy`);
const log = (m) => console.error(`[tiers ${new Date().toISOString().slice(11, 19)}] ${m}`);

normalNpy(data, rows, dims, log);
const fileBytes = (await import('node:fs')).statSync(data).size;
const dataBytes = rows * dims * 4;

log('pinned H2D bandwidth (kmbench h2d)');
const h2d = Number(/RESULT_H2D gbps=([\d.]+)/.exec(run(a.kmbench, ['h2d']).stdout)?.[1]);

/**
 * A plain parallel reader of the file: 16 positional reads of 16 MiB in flight from start to end, in a process of its
 * own with as many threads (a Node process's default pool has 4: the bound would be the pool's, not the file's).
 */
function plainRead() {
  const script = `
    const { open } = require('node:fs/promises');
    (async () => {
      const fh = await open(process.argv[1]);
      const size = (await fh.stat()).size, part = 16 << 20;
      let next = 0;
      const t0 = performance.now();
      await Promise.all(Array.from({ length: 16 }, async () => {
        const buf = Buffer.allocUnsafe(part);
        while (next < size) {
          const pos = next; next += part;
          const want = Math.min(part, size - pos);
          for (let done = 0; done < want;) done += (await fh.read(buf, done, want - done, pos + done)).bytesRead || want;
        }
      }));
      console.log(size / ((performance.now() - t0) / 1000) / 1e9);
    })();`;
  return Number(run(process.execPath, ['-e', script, data], { UV_THREADPOOL_SIZE: '16' }).stdout.trim());
}

/** drops the page cache where this process may (root), for the drive's own speed beside the page cache's */
function dropCaches() {
  const r = spawnSync('sh', ['-c', 'sync && echo 3 > /proc/sys/vm/drop_caches'], { encoding: 'utf8' });
  return r.status === 0;
}

function fit(name, extra) {
  log(`fit ${name}: ${extra.join(' ')}`);
  const dir = join(work, `fit-${name}`);
  const t0 = performance.now();
  const { stdout } = run(process.execPath, ['bin/kmfleet.js', 'fit', '--input', data, '--k', String(k), '--init', 'random', '--max-iter', String(iters), '--tol', '0', '--seed', '1', '--backend', 'cuda', '--out', dir, '--json', ...extra]);
  const wallMs = performance.now() - t0;
  const s = JSON.parse(stdout.trim().split('\n').at(-1));
  const ms = median(s.history.slice(2).map((h) => h.ms));
  const sha = s.outputs.centroids.sha256;
  return { name, args: extra.join(' '), msPerIteration: ms, wallMs: Math.round(wallMs), plan: s.plan, tiers: s.tiers, precision: s.precision, device: s.device, centroids: sha };
}

const runs = [];
runs.push(fit('resident', []));
runs.push(fit('partly-resident', ['--gpu-memory', a['gpu-memory']]));
runs.push(fit('host', ['--gpu-memory', '0']));
runs.push(fit('resident-fp16', ['--precision', 'fp16']));
runs.push(fit('host-fp16', ['--gpu-memory', '0', '--precision', 'fp16']));
const plainCached = plainRead();
const dropped = dropCaches();
const plainDrive = dropped ? plainRead() : undefined;
if (dropped) dropCaches();
runs.push(fit('disk', ['--gpu-memory', '0', '--host-memory', '0']));
// the fp32 file read every pass, each piece rounded to f16 as it lands
runs.push(fit('disk-fp16', ['--gpu-memory', '0', '--host-memory', '0', '--precision', 'fp16']));

// a run's compute bound: the all-resident iteration of its precision
const compute = (r) => runs.find((q) => q.name === (r.precision === 'fp16' ? 'resident-fp16' : 'resident')).msPerIteration;
const sameCentroids = (precision) => new Set(runs.filter((r) => r.precision === precision).map((r) => r.centroids)).size === 1;
const report = {
  device: runs[0].device, rows, dims, k, iters, dataBytes, h2dGBps: h2d,
  plainReadGBps: { pageCache: plainCached, drive: plainDrive ?? null, cacheDropped: dropped },
  sameCentroidsAcrossTiers: { fp32: sameCentroids('fp32'), fp16: sameCentroids('fp16') },
  runs: runs.map((r) => {
    const streamed = r.tiers.laterPasses.bytes.host + r.tiers.laterPasses.bytes.fed;
    const ioMs = streamed / (h2d * 1e9) * 1e3;
    // the disk tier's passes after the first read a file that the page cache holds again (it fits the host's memory):
    // their bound is the plain reader's speed from the page cache
    const bound = r.name.startsWith('disk') ? Math.max(compute(r), streamed / (plainCached * 1e9) * 1e3) : Math.max(compute(r), ioMs);
    return { ...r, streamedGB: streamed / 1e9, boundMs: bound, ratioToBound: r.msPerIteration / bound, streamGBps: streamed / 1e6 / r.msPerIteration };
  }),
};
writeFileSync(join(out, 'tiers.json'), JSON.stringify(report, null, 2));
const rowsOf = (r) => `${(r.tiers.laterPasses.rows.resident / 1e6).toFixed(2)}M / ${(r.tiers.laterPasses.rows.host / 1e6).toFixed(2)}M / ${(r.tiers.laterPasses.rows.fed / 1e6).toFixed(2)}M`;
const table = [
  `${report.device}; ${rows} × ${dims} float32 (${(dataBytes / 1e9).toFixed(2)} GB), k=${k}, ${iters} iterations, random init; pinned H2D ${h2d} GB/s; ` +
    `plain parallel read of the file ${plainCached.toFixed(1)} GB/s (page cache)${plainDrive ? `, ${plainDrive.toFixed(1)} GB/s (drive, cache dropped)` : ''}`,
  '',
  '| run | precision | rows per pass: device / host tier / file | ms/iter | bound | ÷ bound |',
  '|---|---|---|---|---|---|',
  ...report.runs.map((r) => `| ${r.name} (${r.args || 'defaults'}) | ${r.precision} | ${rowsOf(r)} | ${r.msPerIteration.toFixed(1)} | ${r.boundMs.toFixed(1)} | ${r.ratioToBound.toFixed(2)} |`),
  '',
  `centroids identical across tiers: fp32 ${report.sameCentroidsAcrossTiers.fp32}, fp16 ${report.sameCentroidsAcrossTiers.fp16}`,
].join('\n');
writeFileSync(join(out, 'tiers.md'), table + '\n');
console.log(JSON.stringify(report, null, 2));
console.log(table);
