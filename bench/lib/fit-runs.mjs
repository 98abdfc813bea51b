/**
 * What the benchmarks that drive `kmfleet fit` share (bench/tiers, bench/multigpu): running a command from the repo's
 * root, a standard normal float32 .npy made once and kept, and the lower median of per-iteration times.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const ROOT = new URL('../..', import.meta.url).pathname;

/** Runs cmd in the repo's root; its stdout and stderr, or an Error with the end of its stderr when it fails. */
export function run(cmd, args, env = {}) {
  const r = spawnSync(cmd, args, { cwd: ROOT, env: { ...process.env, ...env }, encoding: 'utf8', maxBuffer: 1 << 28 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.status}: ${r.stderr.slice(-2000)}`);
  return { stdout: r.stdout, stderr: r.stderr };
}

/** path: rows × dims standard normal float32 (seed 1), made by numpy when python3 has it, else `kmfleet generate`. */
export function normalNpy(path, rows, dims, log) {
  if (existsSync(path)) return path;
  log(`making ${path}`);
  const py = `
import numpy as np, sys
rows, dims, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
m = np.lib.format.open_memmap(path, mode='w+', dtype=np.float32, shape=(rows, dims))
rng = np.random.default_rng(1)
step = 1 << 20
for i in range(0, rows, step):
    m[i:i + step] = rng.standard_normal((min(step, rows - i), dims), dtype=np.float32)
m.flush()
`;
  const r = spawnSync('python3', ['-c', py, String(rows), String(dims), path], { stdio: 'inherit' });
  if (r.status !== 0) run(process.execPath, ['bin/kmfleet.js', 'generate', '--kind', 'normal', '--rows', String(rows), '--dims', String(dims), '--out', path]);
  return path;
}

/** The lower median (NaN for none). */
export const median = (v) => { const s = [...v].sort((x, y) => x - y); return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN; };
