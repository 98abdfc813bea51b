// CPU benchmark: kmfleet (the product path: dist/'s Engine and k-means driver, as `kmfleet fit` runs them) against
// scikit-learn 1.2.1 (Debian's python3-sklearn under /usr/bin/python3) and faiss-cpu (pip, into a virtual environment
// this script makes under build-cpu/bench-venv: never a runtime dependency), on the same data and the same init.
//   npm run build:native:cpu && npm run build:ts
//   KMFLEET_ADDON=$PWD/build-cpu/Release/kmfleet_native.node node bench/cpu/run.mjs            (the four shapes)
//   ... node bench/cpu/run.mjs 200000,64,256                                                  (one shape)
// ms/iter = (time of a LONG-iteration run − time of a SHORT-iteration run) / (LONG − SHORT) (12 and 2), for each
// tool: initialisation, data loading and interpreter start-up are excluded. Data: standard normal float32, init:
// its first K rows. The build machine is shared: the three tools run in turn BENCH_REPEAT times (default 3), each
// round's ratios are printed, and the median of the rounds' ratios is the result (a ratio from one round compares
// runs seconds apart; the absolute ms are only as good as the machine's load at that moment). The CPU time of each
// tool's process (all its threads) is compared too: less sensitive to the load, it is the ratio a quiet machine with
// both cores for each tool would give.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const SHORT = 2, LONG = Number(process.env.BENCH_ITERS || 12), REPEAT = Number(process.env.BENCH_REPEAT || 3);
const shapes = process.argv[2]
  ? process.argv.slice(2).map((s) => s.split(',').map(Number))
  : [[200_000, 64, 256], [1_000_000, 32, 100], [100_000, 256, 1024], [1_000_000, 128, 1024]];
const venv = process.env.BENCH_VENV || join(root, 'build-cpu', 'bench-venv');

if (!existsSync(join(root, 'dist', 'native', 'index.js'))) throw new Error('dist/ is missing: run npm run build:ts first');
if (!existsSync('/usr/bin/python3')) throw new Error('/usr/bin/python3 with python3-sklearn is needed (apt-get install python3-sklearn)');
if (!existsSync(join(venv, 'bin', 'python'))) {
  console.log(`making ${venv} with faiss-cpu ...`);
  execFileSync('python3', ['-m', 'venv', venv], { stdio: 'inherit' });
  execFileSync(join(venv, 'bin', 'pip'), ['install', '-q', 'faiss-cpu==1.15.1', 'numpy'], { stdio: 'inherit' });
}

function normal(n, seed) {
  // xorshift + Box–Muller: fast, seeded; every tool reads the same file
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

const json = (cmd, args) => JSON.parse(execFileSync(cmd, args, { encoding: 'utf8', maxBuffer: 1 << 20 }).trim().split('\n').pop());
const median = (a) => { const s = [...a].sort((p, q) => p - q); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const f = (v) => v.toFixed(1).padStart(7);

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-bench-'));
const results = [];
let device = '';
try {
  for (const [n, d, k] of shapes) {
    const x = normal(n * d, n + d + k);
    const xPath = join(dir, 'x.f32'), cPath = join(dir, 'c.f32');
    writeFileSync(xPath, x);
    writeFileSync(cPath, x.slice(0, k * d));
    const args = [xPath, n, d, cPath, k, SHORT, LONG, 1].map(String);
    const rounds = [];
    for (let r = 0; r < REPEAT; r++) {
      const ours = json(process.execPath, [join(here, 'kmfleet_lloyd.mjs'), ...args]);
      const sk = json('/usr/bin/python3', [join(here, 'sklearn_lloyd.py'), ...args]);
      const fa = json(join(venv, 'bin', 'python'), [join(here, 'faiss_lloyd.py'), ...args]);
      device = ours.device;
      const round = { ours: ours.msPerIter, sklearn: sk.msPerIter, faiss: fa.msPerIter };
      round.ratio = Math.min(round.sklearn, round.faiss) / round.ours;
      round.cpuRatio = Math.min(sk.cpuMsPerIter, fa.cpuMsPerIter) / ours.cpuMsPerIter;
      rounds.push(round);
      // the same init and the same algorithm: the inertias agree closely (sklearn's with the final centroids, faiss's
      // with those of the last iteration's assignment; sklearn and faiss sum in fp32)
      const agree = Math.max(Math.abs(ours.finalInertia - sk.inertia) / sk.inertia, Math.abs(ours.inertia - fa.inertia) / fa.inertia);
      console.log(`(${n / 1000}k, ${d}, ${k}) round ${r + 1}: kmfleet ${f(ours.msPerIter)}  sklearn ${f(sk.msPerIter)}  faiss ${f(fa.msPerIter)} ms/iter` +
        `  → ${(round.sklearn / round.ours).toFixed(2)}× sklearn, ${(round.faiss / round.ours).toFixed(2)}× faiss` +
        `  [cpu ms/iter: kmfleet ${ours.cpuMsPerIter.toFixed(0)}, sklearn ${sk.cpuMsPerIter.toFixed(0)}, faiss ${fa.cpuMsPerIter.toFixed(0)}; inertia spread ${agree.toExponential(1)}]`);
    }
    results.push({ shape: `${n / 1000}k, ${d}, ${k}`, rounds });
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(`\n| N, D, K | kmfleet ms/iter | scikit-learn 1.2.1 | faiss-cpu 1.15.1 | × the faster peer, wall (median of ${REPEAT}, min–max) | × in CPU time |\n|---|---|---|---|---|---|`);
for (const { shape, rounds } of results) {
  const m = (key) => median(rounds.map((r) => r[key])).toFixed(0);
  const span = (key) => { const v = rounds.map((r) => r[key]); return `**${median(v).toFixed(2)}×** (${Math.min(...v).toFixed(2)}–${Math.max(...v).toFixed(2)})`; };
  console.log(`| ${shape} | ${m('ours')} | ${m('sklearn')} | ${m('faiss')} | ${span('ratio')} | ${span('cpuRatio')} |`);
}
console.log(`\n${cpus()[0]?.model ?? 'cpu'} × ${cpus().length}; ${device}; ${SHORT}- and ${LONG}-iteration runs`);
