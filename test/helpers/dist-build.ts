/**
 * Tests that spawn the real `kmfleet` (bin/kmfleet.js → dist/cli/main.js: CLI commands, child workers) need this
 * checkout's compiled dist/. `ensureDistBuilt()` compiles it (tsc, a few seconds) when a source is newer than the build.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');

export function distBuilt(): boolean {
  return existsSync(join(ROOT, 'dist', 'cli', 'main.js')) && existsSync(join(ROOT, 'dist', 'worker', 'worker.js'));
}

function newestMtime(dir: string): number {
  let newest = 0;
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const st = statSync(p);
    if (st.isDirectory()) newest = Math.max(newest, newestMtime(p));
    else if (name.endsWith('.ts')) newest = Math.max(newest, st.mtimeMs);
  }
  return newest;
}

export function ensureDistBuilt(): void {
  const entry = join(ROOT, 'dist', 'cli', 'main.js');
  const built = existsSync(entry) ? statSync(entry).mtimeMs : 0;
  const sources = Math.max(...['errors', 'producer', 'dashboard', 'core', 'worker', 'native', 'cli', 'api'].map((d) => newestMtime(join(ROOT, d))));
  if (sources > built || !distBuilt()) {
    try {
      execFileSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(ROOT, 'tsconfig.json')], { stdio: 'pipe' });
    } catch (err) {
      // tsc still emits on type errors (in someone's file being edited, say): the build is usable unless it is missing
      if (!distBuilt()) throw err;
    }
  }
}
