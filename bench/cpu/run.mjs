// CPU benchmark: kmfleet's CPU engine vs scikit-learn's Lloyd, same data, same init, same iteration count.
//   npm run build:native && node bench/cpu/run.mjs            (all shapes; KMFLEET_ADDON picks another build)
//   node bench/cpu/run.mjs 200000,64,256                      (one shape)
// ms/iter = (time of LONG iterations − time of SHORT iterations) / (LONG − SHORT), for both (ANCHORS.md's way):
// initialisation, first-pass data loading and Python start-up are excluded. Data: standard normal float32.
// The build machine is shared: the two sides are measured in turn BENCH_REPEAT times (default 3) and the fastest
// run of each counts.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const addonPath = process.env.KMFLEET_ADDON || join(root, 'build', 'Release', 'kmfleet_native.node');
const addon = createRequire(import.meta.url)(addonPath);
const SHORT = 2, LONG = Number(process.env.BENCH_ITERS || 8), REPEAT = Number(process.env.BENCH_REPEAT || 3);
const shapes = process.argv[2]
  ? process.argv.slice(2).map((s) => s.split(',').map(Number))
  : [[200_000, 64, 256], [1_000_000, 32, 100], [100_000, 256, 1024]];

function normal(n, seed) {
  // xorshift + Box–Muller: fast, seeded, identical for both sides (they read the same file)
  let s = seed >>> 0 || 1;
  const u = () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return (s + 0.5) / 4294967296;
  };
  const x = new Float32Array(n);
  for (let i = 0; i < n; i += 2) {
    const r = Math.sqrt(-2 * Math.log(u())), t = 2 * Math.PI * u();
    x[i] = r * Math.cos(t);
    if (i + 1 < n) x[i + 1] = r * Math.sin(t);
  }
  return x;
}

async function ours(x, n, d, k, init, iters) {
  const e = await addon.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu' });
  try {
    e.setCentroids(init);
    const { chunkRows, residentRows } = e.plan;
    const bytes = new Uint8Array(x.buffer);
    const rowBytes = d * 4;
    const pass = async (first) => {
      e.beginPass('fit');
      let b = 0;
      const inflight = [];
      for (let r = first ? 0 : residentRows; r < n; r += chunkRows) {
        const c = Math.min(chunkRows, n - r);
        if (inflight[b]) await inflight[b];
        e.buffer(b).set(bytes.subarray(r * rowBytes, (r + c) * rowBytes));
        inflight[b] = e.feed(b, r, c);
        b = (b + 1) % e.plan.buffers;
      }
      await Promise.all(inflight);
      return e.finishPass();
    };
    let res = await pass(true); // first pass: data enters (resident copy made), not timed
    const t0 = performance.now();
    for (let i = 1; i < SHORT; i++) res = await pass(false);
    const t1 = performance.now();
    for (let i = SHORT; i < iters; i++) res = await pass(false);
    const t2 = performance.now();
    return { msPerIter: (t2 - t1) / (iters - SHORT), inertia: res.inertia, device: e.plan.device, resident: residentRows, t0 };
  } finally {
    e.close();
  }
}

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-bench-'));
const rows = [];
try {
  for (const [n, d, k] of shapes) {
    const x = normal(n * d, n + d + k);
    const init = x.slice(0, k * d); // the first k rows
    writeFileSync(join(dir, 'x.f32'), x);
    writeFileSync(join(dir, 'c.f32'), init);
    // iters+1 fit passes for us (the first one loads the data) = sklearn's LONG iterations of assignment+update
    // interleaved: ours, sklearn, ours, sklearn, ... — the fastest of each side counts
    let o = null, sk = null;
    for (let r = 0; r < REPEAT; r++) {
      const t = await ours(x, n, d, k, init, LONG + 1);
      if (!o || t.msPerIter < o.msPerIter) o = t;
      if (existsSync('/usr/bin/python3')) {
        const out = execFileSync('/usr/bin/python3', [join(root, 'bench', 'cpu', 'sklearn_lloyd.py'), join(dir, 'x.f32'), n, d, join(dir, 'c.f32'), k, SHORT, LONG, 1], { encoding: 'utf8' });
        const s = JSON.parse(out.trim().split('\n').pop());
        // the fastest short run and the fastest long run, each over the repeats (a difference of two noisy runs
        // must not be minimized itself)
        sk = sk ? { ...s, shortMs: Math.min(sk.shortMs, s.shortMs), longMs: Math.min(sk.longMs, s.longMs) } : s;
        sk.msPerIter = (sk.longMs - sk.shortMs) / (LONG - SHORT);
      }
    }
    const row = { shape: `${n / 1000}k, ${d}, ${k}`, ours: o.msPerIter, sklearn: sk?.msPerIter ?? NaN, ratio: sk ? sk.msPerIter / o.msPerIter : NaN, device: o.device };
    rows.push(row);
    // sanity: our last pass reports the inertia of the centroids after LONG updates, as sklearn's inertia_ does
    const agree = sk ? Math.abs(o.inertia - sk.inertia) / sk.inertia : NaN;
    console.log(`(${row.shape})  kmfleet cpu ${o.msPerIter.toFixed(1)} ms/iter   sklearn ${row.sklearn.toFixed(1)} ms/iter   ${row.ratio.toFixed(2)}x   [${o.device}, ${o.resident} rows resident; inertia vs sklearn: ${agree.toExponential(1)} relative]`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(`\n| shape (N, D, K) | kmfleet cpu ms/iter | sklearn 1.2.1 ms/iter | speed-up |\n|---|---|---|---|`);
for (const r of rows) console.log(`| ${r.shape} | ${r.ours.toFixed(1)} | ${r.sklearn.toFixed(1)} | ${r.ratio.toFixed(2)}× |`);
console.log(`\n${cpus()[0]?.model ?? 'cpu'} × ${cpus().length}; ${rows[0]?.device ?? ''}`);
