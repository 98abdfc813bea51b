// Every ts/js code block of README.md and producer/README.md, as written: typechecked against the SDK's declarations
// (`kmfleet/producer` resolves to this checkout's dist/ by the package's own name), then run with node against a real
// redis-server, a real S3 server holding the dataset the snippets name (s3://data/emb.npy) and a real worker. A
// snippet that throws, hangs (say, a client it never closes) or does not typecheck fails the test.
import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import { ensureDistBuilt } from '../helpers/dist-build.js';
import { startStack, type Stack } from './pipeline-fixture.js';

const ROOT = join(import.meta.dirname, '..', '..');
const DOCS = ['README.md', 'producer/README.md'];
const LANGS = new Set(['ts', 'typescript', 'js', 'javascript', 'mjs', 'mts']);

interface Snippet {
  file: string;
  line: number;
  lang: string;
  code: string;
}

function snippets(doc: string): Snippet[] {
  const out: Snippet[] = [];
  const lines = readFileSync(join(ROOT, doc), 'utf8').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w+)\s*$/.exec(lines[i]);
    if (!open) continue;
    const end = lines.indexOf('```', i + 1);
    if (LANGS.has(open[1])) out.push({ file: doc, line: i + 1, lang: open[1], code: lines.slice(i + 1, end).join('\n') });
    i = end;
  }
  return out;
}

const all = DOCS.flatMap(snippets);
// Inside the package: a self-reference to `kmfleet/producer` works only from files under its root (/tmp/ is ignored).
const dir = join(ROOT, 'tmp', `snippets-${process.pid}`);
const source = (s: Snippet, i: number) => join(dir, `snippet-${i}.${s.lang.startsWith('j') || s.lang === 'mjs' ? 'mjs' : 'mts'}`);
let stack: Stack;

beforeAll(async () => {
  ensureDistBuilt();
  mkdirSync(dir, { recursive: true });
  all.forEach((s, i) => writeFileSync(source(s, i), `// ${s.file}:${s.line}\n${s.code}\n`));
  stack = await startStack();
  // What the snippets enqueue: 4096 rows × 8 dims (k up to 1024), seeded.
  const rows = 4096;
  const dims = 8;
  const data = new Float32Array(rows * dims);
  let x = 12345;
  for (let i = 0; i < data.length; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    data[i] = (x / 2 ** 32) * 10 + (i % dims);
  }
  await stack.s3.put('data', 'emb.npy', encodeNpy(data, [rows, dims]));
  await stack.startWorker();
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('README snippets', () => {
  it('the READMEs have snippets to run', () => {
    expect(all.map((s) => s.file)).toEqual(expect.arrayContaining(DOCS));
  });

  it('typecheck as written', () => {
    const program = ts.createProgram(all.map(source), {
      module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, target: ts.ScriptTarget.ES2022,
      lib: ['lib.es2023.d.ts'], types: ['node'], typeRoots: [join(ROOT, 'node_modules', '@types')],
      strict: true, noEmit: true, skipLibCheck: true, allowJs: true, checkJs: true,
    });
    const problems = ts.getPreEmitDiagnostics(program).map((d) => {
      const at = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : undefined;
      return `${d.file ? d.file.fileName.replace(dir + '/', '') : ''}${at ? `:${at.line + 1}` : ''}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
    });
    expect(problems).toEqual([]);
  }, 120_000);

  it.each(all.map((s, i) => [`${s.file}:${s.line}`, i] as const))('%s runs to its end against a real worker', async (_name, i) => {
    const s = all[i];
    const path = source(s, i);
    const js = path.endsWith('.mts')
      ? ts.transpileModule(readFileSync(path, 'utf8'), { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText
      : readFileSync(path, 'utf8');
    const runnable = path.replace(/\.mts$/, '.run.mjs');
    writeFileSync(runnable, js);
    const r = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = execFile(process.execPath, [runnable], {
        cwd: dir, env: { ...process.env, REDIS_URL: stack.redis.url }, timeout: 90_000,
      }, (err, stdout, stderr) => resolve({ code: err ? (child.exitCode ?? -1) : 0, stdout, stderr }));
    });
    expect(r.stderr, `${s.file}:${s.line}\n${r.stdout}`).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).not.toBe('');
  }, 120_000);
});
