/**
 * docs/operations.md stays true to the code: its configuration reference lists every environment variable the code
 * reads (and nothing the code does not), its metrics table lists every metric the workers export, and the files it
 * points at exist.
 */
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createFleetMetrics } from '../../worker/metrics/index.js';
import { envVarsReadByCode } from '../helpers/env-vars.js';

const ROOT = join(import.meta.dirname, '..', '..');
const doc = readFileSync(join(ROOT, 'docs', 'operations.md'), 'utf8');

/** The rows of the table under "## Configuration reference": first-column variable names. */
function documentedVars(): Set<string> {
  const section = doc.split(/^## Configuration reference$/m)[1]?.split(/^## /m)[0];
  if (!section) throw new Error('docs/operations.md has no "## Configuration reference" section');
  const names = new Set<string>();
  for (const line of section.split('\n')) {
    if (!line.startsWith('| `')) continue;
    const first = line.split('|')[1];
    for (const m of first.matchAll(/`([A-Z][A-Z0-9_]+)`/g)) names.add(m[1]);
  }
  return names;
}

const PRODUCT_DIRS = ['errors', 'producer', 'worker', 'native', 'cuda', 'cli', 'api'];
const NOT_PRODUCT = new Set(['test', 'tests', 'bench', 'tools', 'node_modules', 'dist']);

/**
 * KMFLEET_* variables that product code reads — `process.env.X` / `env.X`, `env['X']`, `getenv("X")` — in the
 * source of PRODUCT_DIRS, tests, benchmarks and tools left out; each with the first file that reads it.
 */
function kmfleetVarsReadByProduct(): Map<string, string> {
  const found = new Map<string, string>();
  const patterns = [
    /\benv\.(KMFLEET_[A-Z0-9_]+)/g,
    /\benv\[['"`](KMFLEET_[A-Z0-9_]+)['"`]\]/g,
    /\bgetenv\(\s*"(KMFLEET_[A-Z0-9_]+)"\s*\)/g,
  ];
  const walk = (dir: string): void => {
    if (!existsSync(dir)) return;
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) {
        if (!NOT_PRODUCT.has(e.name)) walk(p);
      } else if (/\.(ts|mts|js|mjs|cpp|cu|cuh|h)$/.test(e.name) && !/\.test\.[mc]?[jt]s$/.test(e.name)) {
        const src = readFileSync(p, 'utf8');
        for (const re of patterns) for (const m of src.matchAll(re)) if (!found.has(m[1])) found.set(m[1], p.slice(ROOT.length + 1));
      }
    }
  };
  for (const d of PRODUCT_DIRS) walk(join(ROOT, d));
  return found;
}

describe('docs/operations.md', () => {
  it('documents every KMFLEET_* variable that product code reads (env.X, env[X], getenv)', () => {
    const read = kmfleetVarsReadByProduct();
    // the scan sees each kind of read: the addon's path (TypeScript) and the engine's diagnostics switch (C++)
    expect(read.get('KMFLEET_ADDON')).toBe(join('native', 'index.ts'));
    expect(read.has('KMFLEET_ENGINE_STATS')).toBe(true);
    const documented = documentedVars();
    const missing = [...read].filter(([v]) => !documented.has(v)).map(([v, file]) => `${v} (${file})`);
    expect(missing, `read by product code but not in the configuration reference: ${missing.join(', ')}`).toEqual([]);
  });

  it('documents every environment variable the code reads', () => {
    const documented = documentedVars();
    const read = [...envVarsReadByCode()].filter((v) => v !== 'HOSTNAME' && v !== 'NODE_ENV');
    expect(read.length).toBeGreaterThan(20);
    const missing = read.filter((v) => !documented.has(v));
    expect(missing, `add to the configuration reference: ${missing.join(', ')}`).toEqual([]);
  });

  it('documents no KMFLEET_/REDIS_ variable that nothing reads', () => {
    const read = envVarsReadByCode();
    const stale = [...documentedVars()].filter((v) => /^(KMFLEET|REDIS)_/.test(v) && !read.has(v));
    expect(stale, `not read by any code: ${stale.join(', ')}`).toEqual([]);
  });

  it('lists every metric the workers export', async () => {
    const fake = { name: 'q', getJobCounts: async () => ({ waiting: 0, prioritized: 0, delayed: 0, active: 0 }) };
    const m = createFleetMetrics({ queue: fake, defaultMetrics: false });
    const names = (await m.registry.getMetricsAsJSON()).map((x) => x.name);
    expect(names.length).toBeGreaterThan(15);
    for (const n of names) expect(doc.includes(`\`${n}\``), n).toBe(true);
  });

  it('says that the Dockerfile and manifests are validated statically, and points at files that exist', () => {
    expect(doc).toMatch(/validated \*\*statically\*\*/);
    const paths = new Set([...doc.matchAll(/`((?:infra|worker|test|docs|producer|cli)\/[\w./-]+\.(?:ya?ml|ts|md))`/g)].map((m) => m[1]));
    expect(paths.size).toBeGreaterThan(5);
    for (const p of paths) expect(existsSync(join(ROOT, p)), p).toBe(true);
    for (const f of readdirSync(join(ROOT, 'infra', 'k8s'))) {
      if (f !== 'kustomization.yaml') expect(doc, `infra/k8s/${f} is not described`).toContain(f.replace(/^redis-\w+\.yaml$/, 'redis-'));
    }
  });
});
