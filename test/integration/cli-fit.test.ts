/**
 * `kmfleet fit` end to end, as a user runs it: the compiled CLI (npm run build:ts) spawned on a generated .npy.
 * Checks the outputs against an independent float64 assignment, the commit order of summary.json, and the exit
 * codes of bad input (2, one error line, nothing written).
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeNpy, encodeNpy } from '../../core/formats/index.js';
import { ensureDistBuilt } from '../helpers/dist-build.js';

const root = join(import.meta.dirname, '../..');
const dir = mkdtempSync(join(tmpdir(), 'kmfleet-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function kmfleet(...args: string[]) {
  const r = spawnSync(process.execPath, [join(root, 'bin/kmfleet.js'), ...args], { cwd: dir, encoding: 'utf8', timeout: 120_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const N = 20_000, D = 8, K = 10;
let data: string;
beforeAll(() => {
  ensureDistBuilt();
  data = join(dir, 'data.npy');
  const g = kmfleet('generate', '--rows', String(N), '--dims', String(D), '--centers', String(K), '--seed', '3', '--cluster-std', '1.5', '--out', data, '--json');
  expect(g.code, g.stderr).toBe(0);
}, 180_000);

const sha = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');

describe('kmfleet fit', () => {
  it('writes centroids, assignments and summary.json (last); labels equal a float64 assignment except ties', () => {
    const out = join(dir, 'out');
    const r = kmfleet('fit', '--input', data, '--k', String(K), '--seed', '1', '--out', out, '--json', '--backend', 'cpu', '--threads', '2');
    expect(r.code, r.stderr).toBe(0);
    const printed = JSON.parse(r.stdout);
    const summary = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8'));
    expect(printed.outputs).toEqual(summary.outputs);
    expect(readdirSync(out).sort()).toEqual(['assignments.npy', 'centroids.npy', 'summary.json']); // no temp files left

    const c = decodeNpy(readFileSync(join(out, 'centroids.npy')));
    expect([c.descr, c.shape]).toEqual(['<f4', [K, D]]);
    const a = decodeNpy(readFileSync(join(out, 'assignments.npy')));
    expect([a.descr, a.shape]).toEqual(['<i4', [N]]);
    expect(summary.outputs.centroids.sha256).toBe(sha(join(out, 'centroids.npy')));
    expect(summary.outputs.assignments.sha256).toBe(sha(join(out, 'assignments.npy')));
    // summary.json is the commit point: written after the outputs
    expect(statSync(join(out, 'summary.json')).mtimeMs).toBeGreaterThanOrEqual(statSync(join(out, 'assignments.npy')).mtimeMs);
    expect(summary).toMatchObject({ rows: N, dims: D, k: K, converged: true, backend: 'cpu' });
    expect(summary.history.length).toBe(summary.iterations);
    expect(['tol', 'tolReassign']).toContain(summary.stopReason);
    expect(summary.spec).toMatchObject({ k: K, metric: 'l2', init: 'kmeans++', maxIter: 300, tol: 1e-4, tolReassign: 0, seed: 1 });
    expect(typeof summary.device).toBe('string');

    // independent float64 assignment for the returned centroids
    const x = decodeNpy(readFileSync(data)).data as Float32Array;
    const cent = c.data as Float32Array;
    const labels = a.data as Int32Array;
    let inertia = 0, ties = 0, mismatches = 0;
    for (let i = 0; i < N; i++) {
      let best = Infinity, second = Infinity, arg = -1;
      for (let k = 0; k < K; k++) {
        let s = 0;
        for (let j = 0; j < D; j++) s += (x[i * D + j] - cent[k * D + j]) ** 2;
        if (s < best) { second = best; best = s; arg = k; } else if (s < second) second = s;
      }
      let own = 0;
      for (let j = 0; j < D; j++) own += (x[i * D + j] - cent[labels[i] * D + j]) ** 2;
      inertia += own;
      if (labels[i] === arg) continue;
      if (second - best <= 1e-6 * Math.max(best, 1e-30) + 1e-6) ties++;
      else mismatches++;
    }
    expect(mismatches).toBe(0);
    expect(ties).toBeLessThan(N / 1000);
    expect(Math.abs(inertia - summary.inertia) / inertia).toBeLessThan(1e-5);
  });

  it('is deterministic by seed, and accepts --init centroids.npy', () => {
    const a = kmfleet('fit', '--input', data, '--k', String(K), '--init', 'random', '--seed', '5', '--tol', '0', '--out', join(dir, 'a'), '--json');
    const b = kmfleet('fit', '--input', data, '--k', String(K), '--init', 'random', '--seed', '5', '--tol', '0', '--out', join(dir, 'b'), '--json');
    expect(a.code, a.stderr).toBe(0);
    expect(b.code, b.stderr).toBe(0);
    expect(sha(join(dir, 'a/centroids.npy'))).toBe(sha(join(dir, 'b/centroids.npy')));
    expect(sha(join(dir, 'a/assignments.npy'))).toBe(sha(join(dir, 'b/assignments.npy')));
    expect(JSON.parse(a.stdout).stopReason).toBe('tolReassign');
    // from a fixed point (no label changed in the last iteration) the next iteration moves nothing, exactly
    const g = kmfleet('fit', '--input', data, '--init', join(dir, 'a/centroids.npy'), '--out', join(dir, 'g'), '--json', '--max-iter', '1');
    expect(g.code, g.stderr).toBe(0);
    const s = JSON.parse(g.stdout);
    expect([s.k, s.initMethod, s.iterations]).toEqual([K, 'given', 1]);
    expect(s.history[0].shift).toBe(0);
    expect(sha(join(dir, 'g/assignments.npy'))).toBe(sha(join(dir, 'a/assignments.npy')));
  });

  it('bad input: exit code 2, one error line, no outputs', () => {
    const cases: [string[], RegExp][] = [];
    const bad = join(dir, 'bad.npy');
    writeFileSync(bad, Buffer.concat([encodeNpy(new Float32Array(40), [10, 4]).subarray(0, 200)]));
    cases.push([['--input', bad, '--k', '2'], /needs 160 bytes of data but the file has 72/]);
    const f8 = join(dir, 'f8.npy');
    writeFileSync(f8, encodeNpy(new Float64Array(40), [10, 4]));
    cases.push([['--input', f8, '--k', '2'], /'<f8' is not supported/]);
    const raw = join(dir, 'x.f32');
    writeFileSync(raw, Buffer.alloc(4 * 7));
    cases.push([['--input', raw, '--format', 'f32', '--dims', '2', '--k', '2'], /not a whole number of 2-dim rows/]);
    cases.push([['--input', join(dir, 'missing.npy'), '--k', '2'], /^kmfleet: error: --input \S*missing\.npy: no such file\n$/]);
    cases.push([['--input', data, '--k', '2', '--init', join(dir, 'gone.npy')], /^kmfleet: error: \S*gone\.npy: no such file or directory\n$/]);
    // as in a job spec (maxIter 1..): 0 iterations is refused, not a run of the init alone
    cases.push([['--input', data, '--k', '2', '--max-iter', '0'], /^kmfleet: error: option '--max-iter <n>' argument '0' is invalid\. --max-iter must be a positive integer \(see kmfleet fit --help\)\n$/]);
    cases.push([['--input', data, '--k', '2', '--bogus'], /^kmfleet: error: unknown option '--bogus' \(see kmfleet fit --help\)\n$/]);
    cases.push([['--input', data, '--k', String(N + 1)], /larger than the dataset/]);
    cases.push([['--input', data, '--k', '0'], /--k must be a positive integer/]);
    cases.push([['--input', data, '--k', '3', '--init', f8], /shape \(10, 4\); expected \(3, 8\)/]);
    cases.push([['--input', data, '--k', '2', '--host-memory', '12Q'], /--host-memory must be a size such as 512M, 12G or 1\.5GiB \(binary units\), got '12Q'/]);
    cases.push([['--input', data, '--k', '2', '--gpu-memory', '-1G'], /--gpu-memory must be a size/]);
    const nan = join(dir, 'nan.npy');
    const v = new Float32Array(100 * 4).fill(1);
    v[57 * 4 + 2] = NaN;
    writeFileSync(nan, encodeNpy(v, [100, 4]));
    cases.push([['--input', nan, '--k', '2'], /row 57 /]);
    for (const [args, re] of cases) {
      const out = join(dir, 'never');
      const r = kmfleet('fit', ...args, '--out', out);
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(2);
      expect(r.stderr).toMatch(re);
      // one error line, the last (a progress line may come before it)
      const lines = r.stderr.trim().split('\n');
      expect(lines.filter((l) => /error/i.test(l)).length).toBe(1);
      expect(lines.at(-1)).toMatch(/^kmfleet: error: /);
      expect(existsSync(join(out, 'summary.json'))).toBe(false);
      expect(existsSync(out) ? readdirSync(out) : []).toEqual([]);
    }
  });

  it('--gpu-memory and --host-memory: rows held where they say, the same bits, and the summary says where rows came from', () => {
    const run = (name: string, ...extra: string[]) => {
      const out = join(dir, `tiers-${name}`);
      const r = kmfleet('fit', '--input', data, '--k', String(K), '--seed', '5', '--max-iter', '6', '--tol', '0', '--chunk-rows', '2000', '--backend', 'cpu', '--out', out, '--json', ...extra);
      expect(r.code, r.stderr).toBe(0);
      return { summary: JSON.parse(r.stdout), centroids: sha(join(out, 'centroids.npy')), labels: sha(join(out, 'assignments.npy')) };
    };
    const all = run('all');
    // the CPU backend's resident rows: an fp32 row and its fp64 norm; 5,000 of them, then 6,000 in the host tier
    const split = run('split', '--gpu-memory', String(5000 * (D * 4 + 8)), '--host-memory', `${(6000 * D * 4) / 1024}K`);
    const fed = run('fed', '--gpu-memory', '0', '--host-memory', '0');
    expect(all.summary.tiers.laterPasses.rows).toEqual({ resident: N, host: 0, fed: 0 });
    expect(split.summary.plan).toMatchObject({ residentRows: 5000, hostRows: 6000 });
    expect(split.summary.tiers).toMatchObject({
      fedFrom: 'file',
      firstPass: { rows: { resident: 0, host: 0, fed: N } },
      laterPasses: { rows: { resident: 5000, host: 6000, fed: N - 11_000 }, bytes: { host: 6000 * D * 4, fed: (N - 11_000) * D * 4 } },
    });
    expect(fed.summary.tiers.laterPasses.rows).toEqual({ resident: 0, host: 0, fed: N });
    for (const r of [split, fed]) {
      expect(r.centroids).toBe(all.centroids);
      expect(r.labels).toBe(all.labels);
    }
  });

  it('keeps its header line on a terminal; its progress line shows an ETA', () => {
    const out = join(dir, 'tty');
    const cmd = [process.execPath, join(root, 'bin/kmfleet.js'), 'fit', '--input', data, '--k', String(K), '--out', out].join(' ');
    const r = spawnSync('script', ['-qec', cmd, '/dev/null'], { cwd: dir, encoding: 'utf8', timeout: 120_000 });
    expect(r.status, r.stdout).toBe(0);
    // the header ends its own line before the first rewritten progress line
    expect(r.stdout).toMatch(/(^|\n)fit \S*data\.npy .* k=10 {2}cpu: [^\r\n]*\r?\n\r\x1b\[2Kiter 1\/300 [^\r]* eta \d/);
  });

  it("estimates the time left from the run's convergence, not from maxIter", () => {
    // overlapping blobs: a dozen iterations or so, long before maxIter
    const slow = join(dir, 'overlap.npy');
    expect(kmfleet('generate', '--rows', '20000', '--dims', '8', '--centers', '10', '--seed', '3', '--cluster-std', '3', '--out', slow).code).toBe(0);
    const r = kmfleet('fit', '--input', slow, '--k', '10', '--seed', '1', '--out', join(dir, 'overlap'), '--json');
    expect(r.code, r.stderr).toBe(0);
    const events = r.stderr.trim().split('\n').map((l) => JSON.parse(l) as { iteration: number; ms: number; etaMs: number });
    const { iterations } = JSON.parse(r.stdout);
    expect(iterations).toBeGreaterThan(8);
    expect(iterations).toBeLessThan(100);
    // in fits of the time an iteration takes: what the run still needs (+ the assign pass) against what maxIter allows
    const fits = events.slice(4).map((e, i) => {
      const recent = events.slice(0, i + 5).slice(-5);
      return [e.etaMs / (recent.reduce((a, x) => a + x.ms, 0) / recent.length), 300 - e.iteration + 1];
    });
    for (const [eta, bound] of fits) expect(eta).toBeLessThan(bound / 4);
  });

  it('--backend cuda where no GPU runs says so', async () => {
    const { gpuInfo } = await import('../../native/index.js');
    const gpu = gpuInfo();
    if (gpu.available) return; // the GPU machine: nothing to check here
    const r = kmfleet('fit', '--input', data, '--k', '2', '--backend', 'cuda', '--out', join(dir, 'cuda'));
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(gpu.reason === 'built without CUDA'
      ? "kmfleet: error: backend 'cuda' requested but this addon was built without CUDA\n"
      : `kmfleet: error: backend 'cuda' requested but no GPU was found (${gpu.reason})\n`);
  });
});
