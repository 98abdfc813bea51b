// The runner of the documentation's sh blocks (test/helpers/doc-block-plan.ts lists the ones it does not run, and why):
// each file's blocks in order, with bash -e, as in one shell — a block starts with the variables the file's earlier
// blocks exported — with `kmfleet` the checkout's bin/kmfleet.js on PATH (as after `npm link`) and `python3` the
// system's, against a real redis-server and a real S3 server (s3rver) holding the datasets the blocks name. Each file
// runs in a scratch directory that stands for the clone's root (its entries are links to this checkout's), so that
// what a block writes stays there. A server block (`kmfleet api`) runs until its URL answers and stays up for the
// file's later blocks; a file's next server block stops it first, as one would before starting another on that port.
// A block fails on a non-zero exit, a `kmfleet: error` line or an error answer of the HTTP API. The only changes to a
// block: the test's Redis URL and free ports (asRun).
import { CreateBucketCommand } from '@aws-sdk/client-s3';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import type { KmfleetWorker } from '../../worker/worker.js';
import { freePort } from '../helpers/redis-server.js';
import { asRun, blocksFor, listing, PORTS, type RunContext } from '../helpers/doc-block-plan.js';
import { runToExit, startBlock, stopBlock, untilAnswers, type BlockProcess } from '../helpers/doc-block-process.js';
import { allDocBlocks, ROOT, where, type DocBlock } from '../helpers/doc-blocks.js';
import { ensureDistBuilt } from '../helpers/dist-build.js';
import { startStack, type Stack } from './pipeline-fixture.js';

const blocks = blocksFor('test/integration/doc-sh-blocks.test.ts', allDocBlocks());
const files = [...new Set(blocks.map((b) => b.file))];

/** Files whose blocks need a worker the test runs (README's queue block starts its own). */
const NEEDS_WORKER = new Set(['docs/api.md']);
/** The datasets the blocks name, as s3://bucket/key. */
const DATASETS = [['data', 'emb.npy'], ['bucket', 'emb.npy']] as const;
/** What a block prints when it went wrong though it exited 0: kmfleet's error line, the API's error body or event. */
const FAILED = /kmfleet: error|"error"\s*:|^event: (error|failed)$/m;

let stack: Stack;
let dir: string;
let bin: string;
let data: Buffer;

/** 4096 rows × 8 dims, seeded: enough rows for the k of every block */
function dataset(): Buffer {
  const rows = 4096;
  const dims = 8;
  const values = new Float32Array(rows * dims);
  let x = 12345;
  for (let i = 0; i < values.length; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    values[i] = (x / 2 ** 32) * 10 + (i % dims);
  }
  return encodeNpy(values, [rows, dims]);
}

/** The block wrapped for bash, as if the file's blocks ran in one shell: the variables earlier blocks set (exported
 * or not) come in; this block's are saved before each command (a server block never ends) and at its exit, when
 * what it started in the background is stopped. */
function script(code: string, state: string): string {
  const s = JSON.stringify(state);
  return [
    `__doc_own=" $(compgen -v | tr '\\n' ' ') "`, // bash's own variables and the environment: not a block's
    `[ -f ${s} ] && . ${s}`,
    // written whole, then renamed: a block never reads a half-written file
    `__doc_save() { local v; { export -p; for v in $(compgen -v); do case "$__doc_own" in *" $v "*) ;; *) [[ $v == __doc_* ]] || declare -p "$v";; esac; done; } > ${s}.$$ && mv -f ${s}.$$ ${s}; }`,
    `trap __doc_save DEBUG`,
    `trap '__doc_status=$?; trap - DEBUG; __doc_save; jobs -p | xargs -r kill -TERM; wait; exit $__doc_status' EXIT`,
    code,
  ].join('\n');
}

beforeAll(async () => {
  ensureDistBuilt();
  dir = mkdtempSync(join(tmpdir(), 'kmfleet-doc-sh-'));
  bin = join(dir, 'bin');
  mkdirSync(bin);
  writeFileSync(join(bin, 'kmfleet'), `#!/bin/sh\nexec "${process.execPath}" "${join(ROOT, 'bin', 'kmfleet.js')}" "$@"\n`);
  chmodSync(join(bin, 'kmfleet'), 0o755);
  // the python the docs ask for: the system's, with Debian's numpy (scripts/setup --tests)
  symlinkSync('/usr/bin/python3', join(bin, 'python3'));
  stack = await startStack();
  data = dataset();
  await stack.s3.handle.client.send(new CreateBucketCommand({ Bucket: 'bucket' }));
  for (const [bucket, key] of DATASETS) await stack.s3.put(bucket, key, data);
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe.each(files)('%s: sh blocks', (file) => {
  const mine = blocks.filter((b) => b.file === file);
  let cwd: string;
  let state: string;
  let ctx: RunContext;
  let server: BlockProcess | undefined;
  let worker: KmfleetWorker | undefined;

  beforeAll(async () => {
    const scratch = mkdtempSync(join(dir, 'doc-'));
    cwd = join(scratch, 'clone');
    mkdirSync(cwd);
    for (const entry of readdirSync(ROOT)) if (!entry.startsWith('.')) symlinkSync(join(ROOT, entry), join(cwd, entry));
    writeFileSync(join(cwd, 'data.npy'), data); // `kmfleet fit --input data.npy` (README) reads it from where it runs
    state = join(scratch, 'exported.sh');
    const ports = new Map<number, number>();
    for (const p of PORTS[file] ?? []) ports.set(p, await freePort());
    ctx = { redisUrl: stack.redis.url, ports };
    if (NEEDS_WORKER.has(file)) worker = await stack.startWorker();
  }, 60_000);

  afterAll(async () => {
    if (server) await stopBlock(server);
    await worker?.shutdown('test end');
  });

  it.each(mine.map((b) => [`${where(b)}`, b] as const))('%s runs as written', async (_name, b: DocBlock) => {
    const env: NodeJS.ProcessEnv = { ...process.env, ...stack.env(), PATH: `${bin}:${process.env.PATH}` };
    delete env.REDIS_URL; // the blocks say where Redis is
    const probe = listing(b)?.listed;
    const isServer = probe !== undefined && 'server' in probe;
    // the running server is stopped before the next server block starts: its exit saves the variables the new block
    // reads, and it holds the port
    if (isServer && server) {
      await stopBlock(server);
      server = undefined;
    }
    const p = startBlock('bash', ['-e', '-c', script(asRun(b.code, ctx), state)], { cwd, env });
    if (probe && 'server' in probe) {
      server = p;
      await untilAnswers(p, asRun(probe.server, ctx), 60_000);
      expect(p.output(), where(b)).not.toMatch(FAILED);
      return;
    }
    const code = await runToExit(p, 100_000);
    expect(code, `${where(b)}\n${p.output()}`).toBe(0);
    expect(p.output(), where(b)).not.toMatch(FAILED);
  }, 120_000);
});
