// Time to a converged answer: `kmfleet fit` (its bounds on, as shipped) beside the same engine and driver through the
// API with EngineOptions.bounds 'auto' and 'off' (the A/B this script keeps, in one harness) and the peers to their own stop, from the same initial
// centroids to tol 1e-4, on seeded blobs of unequal sizes and spreads; then the cost of the bounds where they cannot
// help, on standard normal rows (20 iterations, tol 0). Peers: scikit-learn's lloyd and elkan on the CPU backend
// (Debian's python3-sklearn, /usr/bin/python3); plain PyTorch Lloyd in fp32 on the GPU (x·cᵀ in row tiles, argmin,
// index_add_; stopped by scikit-learn's rule: Σ‖shift‖² ≤ tol · the mean per-dimension variance) with --backend cuda,
// where `kmfleet fit --precision fp16` and `--precision tf32` run the blobs too.
//   npm run build:native:cpu && npm run build:ts
//   KMFLEET_ADDON=$PWD/build-cpu/Release/kmfleet_native.node node bench/converge/run.mjs [OUT.json] [--rows N --dims D --k K
//     --centers C --backend cpu|cuda --python PATH --only blobs|normal --gpu-memory BYTES]
// --gpu-memory (cuda): every kmfleet run takes at most that much device memory, as `kmfleet fit --gpu-memory` does,
// the rows past what it holds kept in the host tier: out of core, the runs with and without bounds only (no peers),
// with the rows of each tier of the last pass.
// Each run is timed in its own process; kmfleet's iteration time is summary.json's timings.iterateMs, the peers' the
// wall time of their iterations (the data already in memory, on the GPU for PyTorch). Runs alternate BENCH_REPEAT
// times (default 2) and the medians are printed: compare within one run of this script only.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    rows: { type: 'string', default: '300000' },
    dims: { type: 'string', default: '32' },
    k: { type: 'string', default: '100' },
    centers: { type: 'string', default: '100' },
    backend: { type: 'string', default: 'cpu' },
    python: { type: 'string' },
    only: { type: 'string' },
    'gpu-memory': { type: 'string' },
  },
});
const backend = a.backend;
if (!['cpu', 'cuda'].includes(backend)) throw new Error(`--backend ${backend}: cpu or cuda`);
const python = a.python ?? (backend === 'cpu' ? '/usr/bin/python3' : 'python3');
const rows = Number(a.rows), dims = Number(a.dims), k = Number(a.k), centers = Number(a.centers);
const gpuMemory = a['gpu-memory'] === undefined ? undefined : Number(a['gpu-memory']);
if (gpuMemory !== undefined && !(gpuMemory > 0)) throw new Error(`--gpu-memory ${a['gpu-memory']}: bytes, above 0`);
const REPEAT = Number(process.env.BENCH_REPEAT || 2);
const work = mkdtempSync(join(tmpdir(), 'kmfleet-converge-'));
const median = (v) => [...v].sort((x, y) => x - y)[Math.floor((v.length - 1) / 2)];

/** blobs: centers uniform in [−10, 10]^D, sizes from a Dirichlet(0.7), spreads log-normal(0, 0.5); rows shuffled */
function makeData(kind, path, initPath) {
  execFileSync(python, ['-c', `
import numpy as np
rng = np.random.default_rng(7)
n, d, c, k = ${rows}, ${dims}, ${centers}, ${k}
if '${kind}' == 'blobs':
    centers = rng.uniform(-10, 10, (c, d))
    share = rng.dirichlet(np.full(c, 0.7)) * n
    sizes = np.floor(share).astype(int)
    sizes[np.argsort(share - sizes)[::-1][: n - sizes.sum()]] += 1
    spreads = rng.lognormal(0, 0.5, c)
    x = np.concatenate([(centers[i] + spreads[i] * rng.standard_normal((sizes[i], d))).astype(np.float32) for i in range(c)])
    x = x[rng.permutation(n)]
else:
    x = rng.standard_normal((n, d), dtype=np.float32)
x = x.astype(np.float32)
np.save('${path}', x)
np.save('${initPath}', x[rng.choice(n, k, replace=False)])
`]);
}

// bounds 'fit': `kmfleet fit` (its progress lines included) in `precision`; 'auto' and 'off': the same driver through
// dist's API, as `kmfleet fit` runs it (bounds 'off' is not a CLI option), so that the A/B shares one harness
function kmfleet(data, init, maxIter, tol, bounds, precision = 'auto') {
  const out = join(work, `fit-${bounds}-${precision}`);
  const script = bounds === 'fit'
    ? null
    : `
import { Engine } from '${root}/dist/native/index.js';
import { LocalFileSource } from '${root}/dist/core/dataset/local-file-source.js';
import { runKmeans } from '${root}/dist/core/kmeans/index.js';
import { decodeNpy, encodeNpy } from '${root}/dist/core/formats/npy-encode.js';
import { readFileSync } from 'node:fs';
const source = await LocalFileSource.open('${data}');
const init = decodeNpy(readFileSync('${init}')).data;
const e = await Engine.open({ rows: source.rows, dims: source.dims, k: ${k}, metric: 'l2', dtype: 'f32', backend: '${backend}', bounds: '${bounds}'${gpuMemory === undefined ? '' : `, memoryBudget: ${gpuMemory}, deviceMemory: ${gpuMemory}`} });
const r = await runKmeans({ engine: e, source, spec: { k: ${k}, metric: 'l2', init, maxIter: ${maxIter}, tol: ${tol}, tolReassign: 0, seed: 0 } });
const c = encodeNpy(r.centroids, [${k}, source.dims]);  // hashed as kmfleet fit hashes centroids.npy
console.log(JSON.stringify({ iterations: r.iterations, stopReason: r.stopReason, inertia: r.inertia, history: r.history, timings: r.timings, rowsLater: r.tiers.lastPass,
  centroids: (await import('node:crypto')).createHash('sha256').update(c).digest('hex') }));
e.close(); await source.close();`;
  const stdout = script
    ? execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', maxBuffer: 64 << 20 })
    : execFileSync(process.execPath, [join(root, 'bin', 'kmfleet.js'), 'fit', '--input', data, '--k', String(k), '--init', init, '--max-iter', String(maxIter),
        '--tol', String(tol), '--precision', precision, '--backend', backend, '--out', out, '--json',
        ...(gpuMemory === undefined ? [] : ['--gpu-memory', String(gpuMemory)])], { encoding: 'utf8', maxBuffer: 64 << 20 });
  const s = JSON.parse(stdout.trim().split('\n').at(-1));
  return {
    iterations: s.iterations, stop: s.stopReason, inertia: s.inertia, iterateMs: s.timings.iterateMs,
    msPerIteration: median(s.history.slice(2).map((h) => h.ms)),
    // from the second iteration: the first also reads the file (the same for every run)
    laterMs: s.history.slice(1).reduce((a, h) => a + h.ms, 0),
    settled: s.history.map((h) => h.settledFraction ?? 0),
    rowsLater: s.rowsLater ?? s.tiers?.laterPasses?.rows,
    ms: s.history.map((h) => h.ms),
    centroids: script ? s.centroids : s.outputs.centroids.sha256,
  };
}

function sklearn(data, init, maxIter, tol, algorithm) {
  const stdout = execFileSync('/usr/bin/python3', ['-c', `
import json, time, numpy as np
from sklearn.cluster import KMeans
x = np.load('${data}'); c = np.load('${init}')
m = KMeans(n_clusters=${k}, init=c, n_init=1, max_iter=${maxIter}, tol=${tol}, algorithm='${algorithm}')
t = time.perf_counter(); m.fit(x); ms = (time.perf_counter() - t) * 1e3
print(json.dumps({'iterations': int(m.n_iter_), 'inertia': float(m.inertia_), 'ms': ms}))
`], { encoding: 'utf8' });
  const s = JSON.parse(stdout.trim());
  return { iterations: s.iterations, inertia: s.inertia, iterateMs: s.ms, msPerIteration: s.ms / s.iterations };
}

/** plain PyTorch Lloyd in fp32 on the GPU, to scikit-learn's stop (see the header) */
function torchLloyd(data, init, maxIter, tol) {
  const stdout = execFileSync(python, ['-c', `
import json, time, numpy as np, torch
torch.backends.cuda.matmul.allow_tf32 = False
x = torch.from_numpy(np.load('${data}')).cuda(); c = torch.from_numpy(np.load('${init}')).cuda()
n, d = x.shape; k = c.shape[0]; tile = 1 << 20
thr = ${tol} * x.var(0).mean().item()
def step(c):
    labels = torch.empty(n, dtype=torch.int64, device='cuda')
    cn = (c * c).sum(1)
    for s in range(0, n, tile):
        labels[s:s + tile] = (cn[None, :] - 2 * (x[s:s + tile] @ c.T)).argmin(1)
    sums = torch.zeros(k, d, device='cuda').index_add_(0, labels, x)
    counts = torch.bincount(labels, minlength=k)
    nxt = torch.where(counts[:, None] > 0, sums / counts.clamp_min(1)[:, None], c)
    return nxt, labels
torch.cuda.synchronize(); t = time.perf_counter(); it = 0
for it in range(1, ${maxIter} + 1):
    nxt, labels = step(c)
    shift = ((nxt - c) ** 2).sum().item(); c = nxt
    if shift <= thr: break
torch.cuda.synchronize(); ms = (time.perf_counter() - t) * 1e3
_, labels = step(c)
inertia = float(((x.double() - c.double()[labels]) ** 2).sum().item())
print(json.dumps({'iterations': it, 'inertia': inertia, 'ms': ms}))
`], { encoding: 'utf8' });
  const s = JSON.parse(stdout.trim().split('\n').at(-1));
  return { iterations: s.iterations, inertia: s.inertia, iterateMs: s.ms, msPerIteration: s.ms / s.iterations };
}

const device = backend === 'cpu' ? `${execFileSync('nproc', { encoding: 'utf8' }).trim()} cores`
  : execFileSync('nvidia-smi', ['--query-gpu=name', '--format=csv,noheader'], { encoding: 'utf8' }).trim().split('\n')[0];
const report = { rows, dims, k, centers, backend, device, repeat: REPEAT, cases: {} };
try {
  for (const [kind, maxIter, tol] of [['blobs', 300, 1e-4], ['normal', 20, 0]].filter(([kind]) => !a.only || a.only === kind)) {
    const data = join(work, `${kind}.npy`), init = join(work, `${kind}-init.npy`);
    makeData(kind, data, init);
    const runs = { fit: [], on: [], off: [], lloyd: [], elkan: [], torch: [], fp16: [], tf32: [] };
    for (let i = 0; i < REPEAT; i++) {
      runs.fit.push(kmfleet(data, init, maxIter, tol, 'fit'));
      runs.on.push(kmfleet(data, init, maxIter, tol, 'auto'));
      runs.off.push(kmfleet(data, init, maxIter, tol, 'off'));
      if (kind === 'blobs' && backend === 'cpu') {
        runs.lloyd.push(sklearn(data, init, maxIter, tol, 'lloyd'));
        runs.elkan.push(sklearn(data, init, maxIter, tol, 'elkan'));
      }
      if (kind === 'blobs' && backend === 'cuda' && gpuMemory === undefined) {
        runs.torch.push(torchLloyd(data, init, maxIter, tol));
        // the rows rounded to fp16 as they are read, labelled exactly; tf32: one-product labels
        runs.fp16.push(kmfleet(data, init, maxIter, tol, 'fit', 'fp16'));
        runs.tf32.push(kmfleet(data, init, maxIter, tol, 'fit', 'tf32'));
      }
    }
    const sum = (list) => list.length && {
      iterations: list[0].iterations, stop: list[0].stop, inertia: list[0].inertia,
      iterateMs: median(list.map((r) => r.iterateMs)), msPerIteration: median(list.map((r) => r.msPerIteration)),
      ...(list[0].laterMs !== undefined ? { laterMs: median(list.map((r) => r.laterMs)) } : {}),
      ...(list[0].settled ? { settled: list[0].settled } : {}),
      ...(list[0].rowsLater ? { rowsLater: list[0].rowsLater } : {}),
      ...(list[0].ms ? { ms: list[0].ms } : {}),
    };
    report.cases[kind] = {
      fit: sum(runs.fit), on: sum(runs.on), off: sum(runs.off), lloyd: sum(runs.lloyd), elkan: sum(runs.elkan), torch: sum(runs.torch),
      fp16: sum(runs.fp16), tf32: sum(runs.tf32),
      sameBits: [...runs.on, ...runs.fit].every((r, i) => r.centroids === runs.off[i % REPEAT].centroids && r.iterations === runs.off[i % REPEAT].iterations && r.inertia === runs.off[i % REPEAT].inertia),
    };
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
if (positionals[0]) writeFileSync(positionals[0], JSON.stringify(report, null, 2));
const b = report.cases.blobs, n = report.cases.normal;
const row = (name, r) => `| ${name} | ${r.iterations} | ${r.stop ?? ''} | ${(r.iterateMs / 1e3).toFixed(2)} | ${r.laterMs === undefined ? '' : (r.laterMs / 1e3).toFixed(2)} | ${r.msPerIteration.toFixed(1)} | ${r.inertia.toPrecision(7)} |`;
const late = (s) => (100 * median(s.slice(-10))).toFixed(1);
console.log([
  ...(b ? [
    `${rows} × ${dims} float32 blobs (${centers} centers, unequal sizes and spreads), k=${k}, tol 1e-4, backend ${backend} (${device}); medians of ${REPEAT}`,
    '',
    '| run | iterations | stop | iterations (s) | from the 2nd (s) | ms/iter (3rd on) | inertia |',
    '|---|---|---|---|---|---|---|',
    row('`kmfleet fit` (bounds)', b.fit), row('the same driver, bounds', b.on), row('the same driver, bounds off', b.off),
    ...(backend === 'cpu' ? [row('scikit-learn lloyd', b.lloyd), row('scikit-learn elkan', b.elkan)]
      : gpuMemory !== undefined ? []
      : [row('`kmfleet fit --precision fp16`', b.fp16), row('`kmfleet fit --precision tf32` (one product)', b.tf32), row('plain PyTorch Lloyd, fp32', b.torch)]),
    ...(gpuMemory !== undefined ? ['', `--gpu-memory ${gpuMemory}: rows of a later pass ${JSON.stringify(b.fit.rowsLater)}`] : []),
    '',
    `bounds: the same bits as without: ${b.sameBits}; rows settled, median of the last 10 iterations: ${late(b.on.settled)} %; time to converge ${(b.off.iterateMs / b.on.iterateMs).toFixed(2)}× faster, from the 2nd iteration ${(b.off.laterMs / b.on.laterMs).toFixed(2)}× (\`kmfleet fit\`: ${(b.off.iterateMs / b.fit.iterateMs).toFixed(2)}×, ${(b.off.laterMs / b.fit.laterMs).toFixed(2)}×)`,
  ] : []),
  ...(n ? [
    `standard normal rows ${rows} × ${dims}, k=${k}, 20 iterations, the same driver (${device}; medians of ${REPEAT}): ${n.on.msPerIteration.toFixed(2)} ms/iter with bounds, ${n.off.msPerIteration.toFixed(2)} without (medians from the 3rd; all 20: ${(100 * (n.on.iterateMs / n.off.iterateMs - 1)).toFixed(1)} % more time), rows settled ${late(n.on.settled)} %, same bits: ${n.sameBits}`,
  ] : []),
].join('\n'));
