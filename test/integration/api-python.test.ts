/**
 * The Python path end to end, every part a real process: redis-server, s3rver, a `kmfleet worker` child, a
 * `kmfleet api` child (token from a file), and examples/python/kmfleet_example.py run by the system /usr/bin/python3
 * (Debian's python3-numpy; `scripts/setup --tests` installs it) — enqueue, progress by server-sent events or
 * long-polling, outputs read from S3 through presigned URLs. Also the API process's refusals at start-up.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../worker/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { bytesOf, ensureDistBuilt, ROOT, spawnWorker, startStack, type ChildWorker, type Stack } from './pipeline-fixture.js';

const PYTHON = '/usr/bin/python3';
const EXAMPLE = join(ROOT, 'examples', 'python', 'kmfleet_example.py');
const TOKEN = 'py-example-token-4f1c9a7e2b';

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function runPython(args: string[], env: Record<string, string>): Promise<Run> {
  return new Promise((resolve, reject) => {
    const p = spawn(PYTHON, [EXAMPLE, ...args], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.on('error', reject);
    p.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

/** `kmfleet api` in a child process; resolves with its URL once it prints it (or rejects with its output). */
function spawnApi(args: string[], env: Record<string, string>): Promise<{ proc: ChildProcess; url: string; output: () => string }> {
  const proc = spawn(process.execPath, [join(ROOT, 'bin', 'kmfleet.js'), 'api', ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  process.once('exit', () => proc.kill('SIGKILL'));
  let out = '';
  return new Promise((resolve, reject) => {
    proc.stdout!.on('data', (d) => (out += d));
    proc.stderr!.on('data', (d) => {
      out += d;
      const m = /kmfleet api: (http:\/\/\S+)/.exec(out);
      if (m) resolve({ proc, url: m[1], output: () => out });
    });
    proc.on('exit', (code) => reject(new Error(`kmfleet api exited (${code}) before listening:\n${out}`)));
  });
}

function runApiToExit(args: string[], env: Record<string, string>): { code: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [join(ROOT, 'bin', 'kmfleet.js'), 'api', ...args], {
    cwd: ROOT, env: { ...process.env, ...env }, encoding: 'utf8', timeout: 20_000,
  });
  return { code: r.status, stderr: r.stderr };
}

describe('Python example → kmfleet api → worker → S3 → numpy', () => {
  let stack: Stack;
  let dir: string;
  let worker: ChildWorker;
  let api: { proc: ChildProcess; url: string; output: () => string };
  let apiEnv: Record<string, string>;

  beforeAll(async () => {
    const numpy = spawnSync(PYTHON, ['-c', 'import numpy'], { encoding: 'utf8' });
    if (numpy.status !== 0) throw new Error(`${PYTHON} cannot import numpy (install python3-numpy: scripts/setup --tests): ${numpy.stderr ?? numpy.error}`);
    ensureDistBuilt();
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-api-python-'));
    const data = await generateDataset(join(dir, 'emb.npy'), { kind: 'blobs', rows: 20_000, dims: 8, centers: 6, seed: 5, clusterStd: 2 });
    await stack.s3.put('data', 'emb.npy', readFileSync(data.path));
    worker = spawnWorker(stack.env({ KMFLEET_CHUNK_ROWS: '2048' }));
    writeFileSync(join(dir, 'token'), `${TOKEN}\n`, { mode: 0o600 });
    apiEnv = { ...stack.env(), KMFLEET_API_TOKEN_FILE: join(dir, 'token'), KMFLEET_LOG_LEVEL: 'warn' };
    api = await spawnApi(['--port', '0'], apiEnv);
  });
  afterAll(async () => {
    api?.proc.kill('SIGTERM');
    worker?.kill('SIGTERM');
    await worker?.exited;
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it.each([
    ['server-sent events', 'py-sse', []],
    ['long-polling', 'py-poll', ['--long-poll']],
  ])('enqueues, follows the progress (%s) and reads the outputs with numpy', async (_how, jobId, extra) => {
    const out = join(dir, jobId);
    const r = await runPython(
      ['--api', api.url, '--dataset', 's3://data/emb.npy', '--k', '6', '--output', 's3://out/py', '--seed', '3', '--job-id', jobId, '--out', out, ...extra],
      { KMFLEET_API_TOKEN: TOKEN },
    );
    expect(r.code, `${r.stderr}\n--- api:\n${api.output()}\n--- worker:\n${worker.output()}`).toBe(0);
    const summary = JSON.parse(r.stdout.trim().split('\n').pop()!);
    expect(summary).toMatchObject({ jobId, centroids: [6, 8], assignments: [20_000] });
    expect(summary.progressReports).toBeGreaterThanOrEqual(1);
    expect(r.stderr).toMatch(new RegExp(`job ${jobId} enqueued`));
    expect(r.stderr).toMatch(/done: \d+ iterations/);

    // what Python read through the presigned URLs is what the worker wrote
    const result = (await stack.client.get(jobId))!.result!;
    expect(summary.iterations).toBe(result.iterations);
    expect(summary.inertia).toBe(result.inertia);
    for (const name of ['centroids', 'assignments']) {
      const saved = decodeNpy(readFileSync(join(out, `${name}.npy`)));
      const written = decodeNpy(await stack.s3.get('out', `py/${jobId}/${name}.npy`));
      expect(saved.descr, name).toBe(written.descr);
      expect(saved.shape, name).toEqual(written.shape);
      expect(bytesOf(saved.data).equals(bytesOf(written.data)), name).toBe(true);
    }
  });

  it('reports a bad spec field by field (exit 2), a wrong token (exit 2), an unreachable API (exit 3)', async () => {
    const bad = await runPython(['--api', api.url, '--dataset', 'data/emb.npy', '--k', '0', '--output', 's3://out/py'], { KMFLEET_API_TOKEN: TOKEN });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/HTTP 400: invalid job spec \(2 problems\)/);
    expect(bad.stderr).toMatch(/^ {2}dataset\.uri: /m);
    expect(bad.stderr).toMatch(/^ {2}k: /m);

    const unauthorized = await runPython(['--api', api.url, '--dataset', 's3://data/emb.npy', '--k', '2', '--output', 's3://out/py'], { KMFLEET_API_TOKEN: 'not-the-token-at-all' });
    expect(unauthorized.code).toBe(2);
    expect(unauthorized.stderr).toMatch(/HTTP 401/);

    const gone = await runPython(['--api', 'http://127.0.0.1:9', '--dataset', 's3://data/emb.npy', '--k', '2', '--output', 's3://out/py'], {});
    expect(gone.code).toBe(3);
    expect(gone.stderr).toMatch(/cannot be reached/);
  });

  it('kmfleet api refuses to start off loopback without a token, and with a bad token setting', () => {
    const { KMFLEET_API_TOKEN_FILE: _file, ...noToken } = apiEnv;
    const open = runApiToExit(['--host', '0.0.0.0', '--port', '0'], { ...noToken, KMFLEET_API_TOKEN: '' });
    expect(open.code).toBe(2);
    expect(open.stderr).toMatch(/^kmfleet: error: refusing to listen on 0\.0\.0\.0 without a token: set KMFLEET_API_TOKEN or KMFLEET_API_TOKEN_FILE/m);

    const short = runApiToExit(['--port', '0'], { ...noToken, KMFLEET_API_TOKEN: 'short' });
    expect(short.code).toBe(2);
    expect(short.stderr).toMatch(/at least 16 characters/);

    const both = runApiToExit(['--port', '0'], { ...apiEnv, KMFLEET_API_TOKEN: TOKEN });
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/not both/);
  });
});
