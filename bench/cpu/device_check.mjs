// The CPU engine on another x86-64 machine (e.g. the GPU machine's host CPU): run-time kernel choice, bitwise
// determinism across kernels and thread counts, exact labels against a float64 reference, and ms/iter.
//   node bench/cpu/device_check.mjs            (needs only Node and build/Release/kmfleet_native.node; KMFLEET_ADDON overrides)
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const addon = createRequire(import.meta.url)(process.env.KMFLEET_ADDON || join(root, 'build', 'Release', 'kmfleet_native.node'));
console.log(`${cpus()[0]?.model} × ${cpus().length}; gpuInfo: ${JSON.stringify(addon.gpuInfo()).slice(0, 200)}`);

function data(n, d, seed) {
  let s = seed >>> 0 || 1;
  const x = new Float32Array(n * d);
  for (let i = 0; i < x.length; i += 2) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; const u = (s + 0.5) / 4294967296;
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; const v = (s + 0.5) / 4294967296;
    const r = Math.sqrt(-2 * Math.log(u));
    x[i] = r * Math.cos(2 * Math.PI * v);
    if (i + 1 < x.length) x[i + 1] = r * Math.sin(2 * Math.PI * v);
  }
  return x;
}

async function fit(x, n, d, k, passes, opts) {
  const e = await addon.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu', ...opts });
  try {
    e.setCentroids(x.slice(0, k * d));
    const bytes = new Uint8Array(x.buffer);
    const times = [];
    for (let p = 0; p < passes; p++) {
      const t = performance.now();
      e.beginPass('fit');
      for (let r = p === 0 ? 0 : e.plan.residentRows, b = 0; r < n; r += e.plan.chunkRows, b ^= 1) {
        const c = Math.min(e.plan.chunkRows, n - r);
        e.buffer(b % e.plan.buffers).set(bytes.subarray(r * d * 4, (r + c) * d * 4));
        await e.feed(b % e.plan.buffers, r, c);
      }
      await e.finishPass();
      times.push(performance.now() - t);
    }
    return { hash: createHash('sha256').update(Buffer.from(e.centroids().buffer)).digest('hex').slice(0, 16), labels: e.labels(), centroids: e.centroids(), device: e.plan.device, times };
  } finally {
    e.close();
  }
}

// 1. the same bits from every kernel and thread count
const x = data(40_000, 37, 1);
const runs = [];
for (const isa of ['generic', 'avx2', 'avx512', 'avx512bf16']) {
  for (const threads of [1, cpus().length]) {
    process.env.KMFLEET_CPU_ISA = isa;
    const r = await fit(x, 40_000, 37, 64, 3, { threads, chunkRows: 3000 });
    runs.push(r);
    console.log(`determinism: ${r.device.padEnd(36)} centroids ${r.hash}`);
  }
}
delete process.env.KMFLEET_CPU_ISA;
const same = runs.every((r) => r.hash === runs[0].hash);
console.log(`determinism: ${same ? 'bitwise identical' : 'DIFFERENT'} across kernels and thread counts`);

// 2. exact labels: one assign-equivalent check (labels of the last fit pass vs float64 with the centroids before it)
{
  const n = 3000, d = 17, k = 40, y = data(n, d, 2);
  const e = await addon.open({ rows: n, dims: d, k, metric: 'l2', dtype: 'f32', backend: 'cpu' });
  e.setCentroids(y.slice(0, k * d));
  const c = e.centroids();
  e.beginPass('assign');
  e.buffer(0).set(new Uint8Array(y.buffer));
  await e.feed(0, 0, n);
  await e.finishPass();
  const labels = e.labels();
  e.close();
  let bad = 0;
  for (let i = 0; i < n; i++) {
    let b1 = Infinity, b2 = Infinity, bi = 0;
    for (let j = 0; j < k; j++) {
      let s = 0;
      for (let t = 0; t < d; t++) { const v = y[i * d + t] - c[j * d + t]; s += v * v; }
      if (s < b1) { b2 = b1; b1 = s; bi = j; } else if (s < b2) b2 = s;
    }
    if (labels[i] !== bi && b2 - b1 > 1e-6 * b2) bad++;
  }
  console.log(`exactness: ${bad} labels differ from float64 outside ties (of ${n})`);
}

// 3. ms/iter on the benchmark shapes (all cores, rows resident; median of the passes after the first)
for (const [n, d, k] of [[200_000, 64, 256], [1_000_000, 32, 100], [100_000, 256, 1024]]) {
  const r = await fit(data(n * d / d, d, n + d + k), n, d, k, 6, {});
  const t = r.times.slice(1).sort((a, b) => a - b);
  console.log(`speed: (${n}, ${d}, ${k}) ${t[Math.floor(t.length / 2)].toFixed(1)} ms/iter [${r.device}]`);
}
