// Time to a converged answer on the CPU backend: `kmfleet fit` (its bounds on, as shipped) beside the same engine and
// driver with EngineOptions.bounds 'off' (the A/B this script keeps) and scikit-learn's lloyd and elkan (Debian's
// python3-sklearn, /usr/bin/python3), from the same initial centroids to tol 1e-4, on seeded blobs of unequal sizes
// and spreads; then the cost of the bounds where they cannot help, on standard normal rows (20 iterations, tol 0).
//   npm run build:native:cpu && npm run build:ts
//   KMFLEET_ADDON=$PWD/build-cpu/Release/kmfleet_native.node node bench/cpu/converge.mjs [OUT.json] [--rows N --dims D --k K]
// Each run is timed in its own process; kmfleet's iteration time is summary.json's timings.iterateMs, scikit-learn's the
// wall time of fit(). Runs alternate (on, off, lloyd, elkan) BENCH_REPEAT times (default 2) and the medians are printed:
// the build machine is shared, so compare within one run of this script only.
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
  },
});
const rows = Number(a.rows), dims = Number(a.dims), k = Number(a.k), centers = Number(a.centers);
const REPEAT = Number(process.env.BENCH_REPEAT || 2);
const work = mkdtempSync(join(tmpdir(), 'kmfleet-converge-'));
const median = (v) => [...v].sort((x, y) => x - y)[Math.floor((v.length - 1) / 2)];

/** blobs: centers uniform in [−10, 10]^D, sizes from a Dirichlet(0.7), spreads log-normal(0, 0.5); rows shuffled */
function makeData(kind, path, initPath) {
  execFileSync('/usr/bin/python3', ['-c', `
import numpy as np
rng = np.random.default_rng(7)
n, d, c, k = ${rows}, ${dims}, ${centers}, ${k}
if '${kind}' == 'blobs':
    centers = rng.uniform(-10, 10, (c, d))
    share = rng.dirichlet(np.full(c, 0.7)) * n
    sizes = np.floor(share).astype(int)
    sizes[np.argsort(share - sizes)[::-1][: n - sizes.sum()]] += 1
    spreads = rng.lognormal(0, 0.5, c)
    x = np.concatenate([centers[i] + spreads[i] * rng.standard_normal((sizes[i], d)) for i in range(c)])
    x = x[rng.permutation(n)]
else:
    x = rng.standard_normal((n, d))
x = x.astype(np.float32)
np.save('${path}', x)
np.save('${initPath}', x[rng.choice(n, k, replace=False)])
`]);
}

function kmfleet(data, init, maxIter, tol, bounds) {
  const out = join(work, `fit-${bounds}`);
  // bounds 'off' is not a CLI option: the same driver through dist's API, as `kmfleet fit` runs it
  const script = bounds === 'auto'
    ? null
    : `
import { Engine } from '${root}/dist/native/index.js';
import { LocalFileSource } from '${root}/dist/core/dataset/local-file-source.js';
import { runKmeans } from '${root}/dist/core/kmeans/index.js';
import { decodeNpy, encodeNpy } from '${root}/dist/core/formats/npy-encode.js';
import { readFileSync } from 'node:fs';
const source = await LocalFileSource.open('${data}');
const init = decodeNpy(readFileSync('${init}')).data;
const e = await Engine.open({ rows: source.rows, dims: source.dims, k: ${k}, metric: 'l2', dtype: 'f32', backend: 'cpu', bounds: 'off' });
const r = await runKmeans({ engine: e, source, spec: { k: ${k}, metric: 'l2', init, maxIter: ${maxIter}, tol: ${tol}, tolReassign: 0, seed: 0 } });
const c = encodeNpy(r.centroids, [${k}, source.dims]);  // hashed as kmfleet fit hashes centroids.npy
console.log(JSON.stringify({ iterations: r.iterations, stopReason: r.stopReason, inertia: r.inertia, history: r.history, timings: r.timings,
  centroids: (await import('node:crypto')).createHash('sha256').update(c).digest('hex') }));
e.close(); await source.close();`;
  const stdout = script
    ? execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', maxBuffer: 64 << 20 })
    : execFileSync(process.execPath, [join(root, 'bin', 'kmfleet.js'), 'fit', '--input', data, '--k', String(k), '--init', init, '--max-iter', String(maxIter),
        '--tol', String(tol), '--backend', 'cpu', '--out', out, '--json'], { encoding: 'utf8', maxBuffer: 64 << 20 });
  const s = JSON.parse(stdout.trim().split('\n').at(-1));
  return {
    iterations: s.iterations, stop: s.stopReason, inertia: s.inertia, iterateMs: s.timings.iterateMs,
    msPerIteration: median(s.history.slice(2).map((h) => h.ms)),
    settled: s.history.map((h) => h.settledFraction ?? 0),
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

const report = { rows, dims, k, centers, repeat: REPEAT, cpus: execFileSync('nproc', { encoding: 'utf8' }).trim(), cases: {} };
try {
  for (const [kind, maxIter, tol] of [['blobs', 300, 1e-4], ['normal', 20, 0]]) {
    const data = join(work, `${kind}.npy`), init = join(work, `${kind}-init.npy`);
    makeData(kind, data, init);
    const runs = { on: [], off: [], lloyd: [], elkan: [] };
    for (let i = 0; i < REPEAT; i++) {
      runs.on.push(kmfleet(data, init, maxIter, tol, 'auto'));
      runs.off.push(kmfleet(data, init, maxIter, tol, 'off'));
      if (kind === 'blobs') {
        runs.lloyd.push(sklearn(data, init, maxIter, tol, 'lloyd'));
        runs.elkan.push(sklearn(data, init, maxIter, tol, 'elkan'));
      }
    }
    const sum = (list) => list.length && {
      iterations: list[0].iterations, stop: list[0].stop, inertia: list[0].inertia,
      iterateMs: median(list.map((r) => r.iterateMs)), msPerIteration: median(list.map((r) => r.msPerIteration)),
      ...(list[0].settled ? { settled: list[0].settled } : {}),
    };
    report.cases[kind] = {
      on: sum(runs.on), off: sum(runs.off), lloyd: sum(runs.lloyd), elkan: sum(runs.elkan),
      sameBits: runs.on.every((r, i) => r.centroids === runs.off[i].centroids && r.iterations === runs.off[i].iterations && r.inertia === runs.off[i].inertia),
    };
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
if (positionals[0]) writeFileSync(positionals[0], JSON.stringify(report, null, 2));
const b = report.cases.blobs, n = report.cases.normal;
const row = (name, r) => `| ${name} | ${r.iterations} | ${r.stop ?? ''} | ${(r.iterateMs / 1e3).toFixed(2)} | ${r.msPerIteration.toFixed(1)} | ${r.inertia.toPrecision(7)} |`;
const late = (s) => (100 * median(s.slice(-10))).toFixed(1);
console.log([
  `${rows} × ${dims} float32 blobs (${centers} centers, unequal sizes and spreads), k=${k}, tol 1e-4, ${report.cpus} cores; medians of ${REPEAT}`,
  '',
  '| run | iterations | stop | iterations (s) | ms/iter (3rd on) | inertia |',
  '|---|---|---|---|---|---|',
  row('kmfleet fit (bounds)', b.on), row('the same, bounds off', b.off), row('scikit-learn lloyd', b.lloyd), row('scikit-learn elkan', b.elkan),
  '',
  `bounds: the same bits as without: ${b.sameBits}; rows settled, median of the last 10 iterations: ${late(b.on.settled)} %; time to converge ${(b.off.iterateMs / b.on.iterateMs).toFixed(2)}× faster`,
  `standard normal rows, 20 iterations: ${n.on.msPerIteration.toFixed(1)} ms/iter with bounds, ${n.off.msPerIteration.toFixed(1)} without (${(100 * (n.on.msPerIteration / n.off.msPerIteration - 1)).toFixed(1)} %), rows settled ${late(n.on.settled)} %, same bits: ${n.sameBits}`,
].join('\n'));
