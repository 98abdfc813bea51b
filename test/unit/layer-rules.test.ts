/**
 * The layer rules of docs/DESIGN.md ("Layer rules"), checked over every relative import of the TypeScript sources and
 * every #include of the C++/CUDA sources: a new import that crosses a layer the wrong way fails here.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..', '..');

function filesUnder(dir: string, ext: RegExp): string[] {
  const abs = join(ROOT, dir);
  if (!existsSync(abs)) return [];
  const out: string[] = [];
  for (const name of readdirSync(abs)) {
    const rel = join(dir, name);
    if (statSync(join(ROOT, rel)).isDirectory()) out.push(...filesUnder(rel, ext));
    else if (ext.test(name)) out.push(rel);
  }
  return out;
}

/** Every relative import of a TS file, as a repo-relative path ('.js' → '.ts'). */
function importsOf(file: string): string[] {
  const src = readFileSync(join(ROOT, file), 'utf8');
  const specs = [...src.matchAll(/(?:from|import)\s*\(?\s*['"](\.{1,2}\/[^'"]+)['"]/g)].map((m) => m[1]);
  return specs.map((s) => normalize(join(dirname(file), s)).replace(/\.js$/, '.ts'));
}

const TS_LAYERS = ['errors', 'producer', 'core', 'worker', 'native', 'cli', 'api', 'dashboard'] as const;
type Layer = (typeof TS_LAYERS)[number];
const layerOf = (path: string): Layer | undefined => TS_LAYERS.find((l) => path === l || path.startsWith(`${l}/`));

/** The root of every error: a leaf that each layer may import, through its index only. */
const ERRORS = { errors: (t: string) => t === 'errors/index.ts' };

/** What a file of each layer may import from another layer (undefined: nothing of it). */
const MAY_IMPORT: Record<Layer, Partial<Record<Layer, (target: string) => boolean>>> = {
  errors: {},
  producer: { ...ERRORS },
  core: { ...ERRORS, native: (t) => t === 'native/index.ts' },
  worker: { ...ERRORS, producer: () => true, core: (t) => t === 'core/index.ts', native: (t) => t === 'native/index.ts' },
  native: { ...ERRORS },
  cli: { ...ERRORS, producer: () => true, core: (t) => t === 'core/index.ts', worker: () => true, native: (t) => t === 'native/index.ts', api: () => true, dashboard: () => true },
  api: { ...ERRORS, producer: () => true, worker: (t) => t === 'worker/s3/client.ts' },
  dashboard: { ...ERRORS, producer: () => true },
};

describe('layer rules (docs/DESIGN.md)', () => {
  it('TypeScript: every relative import across layers is one the rules allow', () => {
    const broken: string[] = [];
    let checked = 0;
    for (const layer of TS_LAYERS) {
      for (const file of filesUnder(layer, /\.ts$/)) {
        for (const target of importsOf(file)) {
          const to = layerOf(target);
          if (to === layer) continue;
          checked++;
          const rule = to && MAY_IMPORT[layer][to];
          if (!rule || !rule(target)) broken.push(`${file} → ${relative(ROOT, join(ROOT, target))}`);
        }
      }
    }
    expect(checked).toBeGreaterThan(50); // the scan found the imports
    expect(broken).toEqual([]);
  });

  it('C++/CUDA: native/src includes no cuda/ header; cuda/ includes only the interface headers of native/src', () => {
    const CUDA_MAY_INCLUDE = new Set(['backend.h', 'cuda_bridge.h', 'thread_pool.h', 'kmeans_plusplus_rng.h', 'host_tier.h', 'host_memory.h']);
    const broken: string[] = [];
    const includesOf = (file: string) => [...readFileSync(join(ROOT, file), 'utf8').matchAll(/#include "([^"]+)"/g)].map((m) => m[1]);
    const found = (dir: string, name: string) => existsSync(join(ROOT, dir, name));
    let checked = 0;
    for (const file of filesUnder('native/src', /\.(h|cpp|cuh)$/)) {
      for (const inc of includesOf(file)) {
        checked++;
        if (!found(dirname(file), inc) && !found('native/src', inc)) broken.push(`${file} includes ${inc} (not in native/src)`);
      }
    }
    for (const file of filesUnder('cuda', /\.(h|cuh|cu|cpp)$/)) {
      for (const inc of includesOf(file)) {
        checked++;
        if (found(dirname(file), inc) || found('cuda', inc)) continue;
        const base = inc.replace(/^(\.\.\/)+/, '');
        if (!(found('native/src', base) && CUDA_MAY_INCLUDE.has(base))) broken.push(`${file} includes ${inc}`);
      }
    }
    expect(checked).toBeGreaterThan(50);
    expect(broken).toEqual([]);
  });
});
