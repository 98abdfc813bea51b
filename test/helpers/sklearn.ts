/**
 * scikit-learn as an outside reference: KMeans(algorithm="lloyd", n_init=1, init=<given centroids>) run by
 * /usr/bin/python3 (Debian's python3-sklearn; `scripts/setup --tests` installs it). `sklearnAvailable()` says why
 * not when it can't run, so a test can skip with that reason.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const PYTHON = '/usr/bin/python3';
const SCRIPT = join(dirname(fileURLToPath(import.meta.url)), 'sklearn_kmeans.py');

/** null when sklearn runs here, else the reason it does not. */
export function sklearnUnavailable(): string | null {
  const r = spawnSync(PYTHON, ['-c', 'import sklearn, numpy'], { encoding: 'utf8' });
  if (r.error) return `${PYTHON} not found (${r.error.message}); install python3-sklearn (scripts/setup --tests)`;
  if (r.status !== 0) return `scikit-learn is not importable by ${PYTHON}: ${r.stderr.trim().split('\n').pop()}; install python3-sklearn`;
  return null;
}

export interface SklearnResult {
  labels: Int32Array;
  centers: Float64Array;
  inertia: number;
  nIter: number;
  version: string;
}

export function sklearnKMeans(
  x: Float32Array, n: number, d: number, init: Float32Array, k: number, maxIter: number, metric: 'l2' | 'cosine' = 'l2',
): SklearnResult {
  const dir = mkdtempSync(join(tmpdir(), 'kmfleet-sklearn-'));
  try {
    writeFileSync(join(dir, 'x.f32'), x);
    writeFileSync(join(dir, 'c.f32'), init);
    const out = execFileSync(PYTHON, [SCRIPT, dir, String(n), String(d), String(k), String(maxIter), metric], { encoding: 'utf8' });
    const meta = JSON.parse(out.trim().split('\n').pop()!) as { inertia: number; nIter: number; version: string };
    const lb = readFileSync(join(dir, 'labels.i32'));
    const cb = readFileSync(join(dir, 'centers.f64'));
    return {
      labels: new Int32Array(lb.buffer.slice(lb.byteOffset, lb.byteOffset + lb.byteLength)),
      centers: new Float64Array(cb.buffer.slice(cb.byteOffset, cb.byteOffset + cb.byteLength)),
      ...meta,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
