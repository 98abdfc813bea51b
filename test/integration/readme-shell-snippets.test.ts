// Every sh block of README.md, run as written with bash -e (`kmfleet` the checkout's bin/kmfleet.js on PATH, as after
// `npm link`) against a real redis-server, a real S3 server holding the dataset the snippets name and the worker the
// snippet itself starts — or, for a block that cannot run inside a test, the reason, so that a new block must be
// classified here. The only change to a block: the Redis URL it exports is the test's server's.
import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import { ensureDistBuilt } from '../helpers/dist-build.js';
import { startStack, type Stack } from './pipeline-fixture.js';

const ROOT = join(import.meta.dirname, '..', '..');
const README = readFileSync(join(ROOT, 'README.md'), 'utf8').split('\n');

/** Blocks that are not run here, by their first line, and why. */
const NOT_RUN: Record<string, string> = {
  'scripts/demo    # the main job: a local Redis + S3, a 1M × 32 dataset, a job through the queue, live progress, report':
    'the demo and the whole suite: scripts/demo runs unattended in test/integration/pipeline-demo.test.ts',
};

interface Block {
  line: number;
  code: string;
}

const blocks: Block[] = [];
for (let i = 0; i < README.length; i++) {
  if (!/^```sh\s*$/.test(README[i])) continue;
  const end = README.indexOf('```', i + 1);
  blocks.push({ line: i + 1, code: README.slice(i + 1, end).join('\n') });
  i = end;
}
const runnable = blocks.filter((b) => !(b.code.split('\n')[0] in NOT_RUN));

let stack: Stack;
let dir: string;
let bin: string;

/** 4096 rows × 8 dims, seeded: enough rows for the k of every snippet */
function dataset(): Buffer {
  const rows = 4096;
  const dims = 8;
  const data = new Float32Array(rows * dims);
  let x = 12345;
  for (let i = 0; i < data.length; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    data[i] = (x / 2 ** 32) * 10 + (i % dims);
  }
  return encodeNpy(data, [rows, dims]);
}

beforeAll(async () => {
  ensureDistBuilt();
  dir = mkdtempSync(join(tmpdir(), 'kmfleet-sh-snippets-'));
  bin = join(dir, 'bin');
  mkdirSync(bin);
  writeFileSync(join(bin, 'kmfleet'), `#!/bin/sh\nexec "${process.execPath}" "${join(ROOT, 'bin', 'kmfleet.js')}" "$@"\n`);
  chmodSync(join(bin, 'kmfleet'), 0o755);
  stack = await startStack();
  const data = dataset();
  await stack.s3.put('data', 'emb.npy', data);
  // `kmfleet fit --input data.npy` reads it from the working directory
  writeFileSync(join(dir, 'data.npy'), data);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('README sh blocks', () => {
  it('every block is run below or says why not', () => {
    expect(blocks.length).toBeGreaterThan(1);
    const firstLines = blocks.map((b) => b.code.split('\n')[0]);
    for (const known of Object.keys(NOT_RUN)) expect(firstLines, `NOT_RUN names a block README.md no longer has: ${known}`).toContain(known);
  });

  it.each(runnable.map((b) => [`README.md:${b.line}`, b] as const))('%s runs as written', async (_name, b) => {
    const script = b.code.replaceAll('redis://127.0.0.1:6379', stack.redis.url);
    const env = { ...process.env, ...stack.env(), PATH: `${bin}:${process.env.PATH}` };
    delete (env as Record<string, string | undefined>).REDIS_URL; // the snippet says where Redis is
    // its own process group: a worker the snippet starts with & is stopped with it
    const child = spawn('bash', ['-e', '-c', `${script}\nstatus=$?\njobs -p | xargs -r kill -TERM\nwait\nexit $status`], {
      cwd: dir, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const code = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 100_000);
      child.once('exit', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    expect(code, `README.md:${b.line}\n${out}`).toBe(0);
    expect(out).not.toMatch(/kmfleet: error/);
  }, 120_000);
});
