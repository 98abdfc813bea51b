// The runner of the documentation's ts/js blocks (test/helpers/doc-block-plan.ts lists the ones it does not run, and
// why): each typechecked as written against the package's declarations (`kmfleet/producer` and `kmfleet/dashboard`
// resolve to this checkout's dist/ by the package's own name), then run with node against a real redis-server, a real
// S3 server holding the dataset the blocks name (s3://data/emb.npy) and a real worker. A block that throws, hangs (say,
// a client it never closes), writes to stderr or does not typecheck fails. A server block (the dashboard mounted in an
// app) runs until its URL answers, every URL it names must answer, and then it is stopped. The only changes to a block:
// the test's Redis URL and free ports (asRun).
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import { asRun, blocksFor, listing, PORTS, type RunContext } from '../helpers/doc-block-plan.js';
import { runToExit, startBlock, stopBlock, untilAnswers } from '../helpers/doc-block-process.js';
import { allDocBlocks, ROOT, where, type DocBlock } from '../helpers/doc-blocks.js';
import { ensureDistBuilt } from '../helpers/dist-build.js';
import { freePort } from '../helpers/redis-server.js';
import { startStack, type Stack } from './pipeline-fixture.js';

const all = blocksFor('test/integration/doc-ts-blocks.test.ts', allDocBlocks());
// Inside the package: a self-reference to `kmfleet/producer` works only from files under its root (/tmp/ is ignored).
const dir = join(ROOT, 'tmp', `doc-ts-blocks-${process.pid}`);
const source = (b: DocBlock, i: number) => join(dir, `block-${i}.${b.lang.startsWith('j') || b.lang === 'mjs' ? 'mjs' : 'mts'}`);
let stack: Stack;
const ctx = new Map<string, RunContext>();

beforeAll(async () => {
  ensureDistBuilt();
  mkdirSync(dir, { recursive: true });
  stack = await startStack();
  for (const file of new Set(all.map((b) => b.file))) {
    const ports = new Map<number, number>();
    for (const p of PORTS[file] ?? []) ports.set(p, await freePort());
    ctx.set(file, { redisUrl: stack.redis.url, ports });
  }
  all.forEach((b, i) => writeFileSync(source(b, i), `// ${where(b)}\n${asRun(b.code, ctx.get(b.file)!)}\n`));
  // What the blocks enqueue: 4096 rows × 8 dims (k up to 1024), seeded.
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

describe('documentation ts/js blocks', () => {
  it('the READMEs and operations.md have blocks to run', () => {
    expect(all.map((b) => b.file)).toEqual(expect.arrayContaining(['README.md', 'producer/README.md', 'docs/operations.md']));
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

  it.each(all.map((b, i) => [where(b), i] as const))('%s runs as written against a real worker', async (_name, i) => {
    const b = all[i];
    const path = source(b, i);
    const js = path.endsWith('.mts')
      ? ts.transpileModule(readFileSync(path, 'utf8'), { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText
      : readFileSync(path, 'utf8');
    const runnable = path.replace(/\.mts$/, '.run.mjs');
    writeFileSync(runnable, js);
    const p = startBlock(process.execPath, [runnable], { cwd: dir, env: { ...process.env, REDIS_URL: stack.redis.url } });
    const listed = listing(b)?.listed;
    if (listed && 'server' in listed) {
      try {
        for (const url of [listed.server, ...(listed.also ?? [])]) await untilAnswers(p, asRun(url, ctx.get(b.file)!), 60_000);
        expect(p.output(), where(b)).toBe('');
      } finally {
        await stopBlock(p);
      }
      return;
    }
    const code = await runToExit(p, 90_000);
    expect(p.stderr(), `${where(b)}\n${p.output()}`).toBe('');
    expect(code).toBe(0);
    expect(p.output()).not.toBe('');
  }, 120_000);
});
