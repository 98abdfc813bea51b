/**
 * The environment variables the project's code reads — `env.X`, `env['X']`, and quoted KMFLEET_/REDIS_/AWS_ names
 * (config tables) in the TypeScript of errors/, worker/, producer/, cli/, api/ and native/, and `getenv("X")` in the engine's C++ and
 * CUDA (native/src, cuda/ without its stand-alone tools) — so that docs, compose and manifests can be checked against
 * the code instead of against a hand-kept list.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');

export function envVarsReadByCode(root: string = ROOT): Set<string> {
  const names = new Set<string>();
  const walk = (dir: string): void => {
    if (!existsSync(dir)) return;
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(cpp|cu|cuh|h)$/.test(e.name) && !p.includes(join('cuda', 'tools'))) {
        const src = readFileSync(p, 'utf8');
        for (const m of src.matchAll(/getenv\("([A-Z_][A-Z0-9_]*)"\)/g)) names.add(m[1]);
      } else if (e.name.endsWith('.ts') && !e.name.endsWith('.test.ts')) {
        const src = readFileSync(p, 'utf8');
        for (const m of src.matchAll(/env\.([A-Z_][A-Z0-9_]*)/g)) names.add(m[1]);
        for (const m of src.matchAll(/env\[['"]([A-Z_][A-Z0-9_]*)['"]\]/g)) names.add(m[1]);
        // an error's `code = 'REDIS_…'` (errors/exit-status.ts) names no variable
        for (const m of src.matchAll(/(?<!code = )['"`]((?:KMFLEET|REDIS|AWS)_[A-Z0-9_]+)['"`]/g)) names.add(m[1]);
      }
    }
  };
  for (const d of ['errors', 'worker', 'producer', 'dashboard', 'cli', 'native', 'cuda', 'api']) walk(join(root, d));
  return names;
}
