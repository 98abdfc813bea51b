// kmfleet's Lloyd through the product path (dist/: Engine.open + the k-means driver on a local file, as `kmfleet fit`
// runs it, outputs left out), timed like sklearn_lloyd.py: (long run − short run) / extra iterations.
//   node bench/cpu/kmfleet_lloyd.mjs DATA.f32 N D INIT.f32 K SHORT LONG [REPEAT]     (after npm run build:ts)
// prints one JSON line: {"msPerIter", "cpuMsPerIter", "shortMs", "longMs", "inertia" (the last fit pass's, with the
// centroids before its update: faiss's obj[-1]), "finalInertia" (with the final centroids: sklearn's inertia_), "device"}
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const { Engine } = await import(join(root, 'dist', 'native', 'index.js'));
const { LocalFileSource } = await import(join(root, 'dist', 'core', 'dataset', 'local-file-source.js'));
const { runKmeans } = await import(join(root, 'dist', 'core', 'kmeans', 'driver.js'));

const [path, n, d, initPath, k, short, long, repeat = '1'] = process.argv.slice(2);
const [N, D, K, SHORT, LONG, REPEAT] = [n, d, k, short, long, repeat].map(Number);
const initBytes = readFileSync(initPath); // may sit in a larger pooled buffer: copy exactly its bytes
const init = new Float32Array(initBytes.buffer.slice(initBytes.byteOffset, initBytes.byteOffset + initBytes.byteLength));

async function run(iters) {
  const t = performance.now(), c = process.cpuUsage();
  const source = await LocalFileSource.open(path, { format: 'f32', dims: D });
  try {
    const engine = await Engine.open({ rows: N, dims: D, k: K, metric: 'l2', dtype: 'f32', backend: 'cpu' });
    try {
      const spec = { k: K, metric: 'l2', init: init.slice(), maxIter: iters, tol: 0, tolReassign: 0, seed: 0 };
      const r = await runKmeans({ engine, source, spec });
      if (r.iterations !== iters) throw new Error(`kmfleet stopped after ${r.iterations} of ${iters} iterations (${r.stopReason})`);
      const u = process.cpuUsage(c);
      return { ms: performance.now() - t, cpuMs: (u.user + u.system) / 1000, inertia: r.history[r.history.length - 1].inertia, finalInertia: r.inertia, device: engine.plan.device };
    } finally {
      engine.close();
    }
  } finally {
    await source.close();
  }
}

await run(1); // warm-up: the addon's load, the file in the page cache
let s = null, l = null;
for (let i = 0; i < REPEAT; i++) {
  const a = await run(SHORT), b = await run(LONG);
  s = s ? { ms: Math.min(s.ms, a.ms), cpuMs: Math.min(s.cpuMs, a.cpuMs) } : a;
  l = l ? { ...b, ms: Math.min(l.ms, b.ms), cpuMs: Math.min(l.cpuMs, b.cpuMs) } : b;
}
console.log(JSON.stringify({ msPerIter: (l.ms - s.ms) / (LONG - SHORT), cpuMsPerIter: (l.cpuMs - s.cpuMs) / (LONG - SHORT), shortMs: s.ms, longMs: l.ms, inertia: l.inertia, finalInertia: l.finalInertia, device: l.device }));
