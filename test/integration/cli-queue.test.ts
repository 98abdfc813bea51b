// The queue commands of the `kmfleet` CLI end to end: `node bin/kmfleet.js ...` against a real redis-server,
// with a real (simulated) BullMQ worker where a job has to run.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { KmfleetClient, type JobResult } from '../../producer/index.js';
import { keyspace } from '../../producer/keys.js';
import { recordResult } from '../../producer/results.js';
import { ensureDistBuilt } from '../helpers/dist-build.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';
import { startSimWorker, type SimWorker } from './producer-sim-worker.js';

const root = new URL('../../', import.meta.url).pathname;
const bin = join(root, 'bin/kmfleet.js');

let server: RedisServerHandle;
let prefixN = 0;
let prefix = '';
const open: { close(): Promise<void> }[] = [];
let tmp: string;

beforeAll(async () => {
  ensureDistBuilt();
  server = await startRedisServer();
  tmp = mkdtempSync(join(tmpdir(), 'kmfleet-cli-'));
}, 120_000);
afterAll(async () => {
  await server.stop();
  rmSync(tmp, { recursive: true, force: true });
});
afterEach(async () => {
  for (const c of open.splice(0).reverse()) await c.close();
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI with this test's prefix (env KMFLEET_PREFIX) against the test server (env REDIS_URL). */
function kmfleet(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [bin, ...args],
      { env: { ...process.env, REDIS_URL: server.url, KMFLEET_PREFIX: prefix, ...env }, timeout: 30_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

function freshPrefix(): string {
  prefix = `cli${++prefixN}`;
  return prefix;
}
function sdk(): KmfleetClient {
  const c = new KmfleetClient({ connection: server.url, prefix });
  open.push(c);
  return c;
}
async function worker(sim: Parameters<typeof startSimWorker>[2] = {}): Promise<SimWorker> {
  const w = await startSimWorker(server.connection, keyspace({ prefix }), sim);
  open.push(w);
  return w;
}
const specFlags = ['--dataset', 's3://data-bkt/x.npy', '--k', '8', '--output', 's3://out-bkt/runs'];

describe('kmfleet enqueue', () => {
  it('refuses a bad spec with ONE line naming every bad field, exit 2, nothing enqueued', async () => {
    freshPrefix();
    const r = await kmfleet(['enqueue', '--dataset', 'http://x', '--k', 'many', '--metric', 'manhattan', '--tol-reassign', '2', '--output', 's3://out-bkt']);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^kmfleet: error: invalid job spec \(4 problems\): dataset\.uri: .*; k: .*got "many".*; metric: .*; tolReassign: /);
    expect(await (await sdk().queue()).count()).toBe(0);
  });

  it('is idempotent with --job-id, reads --spec files (flags win), prints JSON with --json', async () => {
    freshPrefix();
    const file = join(tmp, 'spec.json');
    writeFileSync(file, JSON.stringify({ dataset: { uri: 's3://data-bkt/raw.f32', format: 'f32', dims: 16 }, k: 4, output: 's3://out-bkt', seed: 7 }));
    const a = await kmfleet(['enqueue', '--spec', file, '--k', '32', '--job-id', 'daily-1', '--priority', '3', '--json']);
    expect(a.code).toBe(0);
    expect(JSON.parse(a.stdout)).toMatchObject({ id: 'daily-1', created: true, sameSpec: true });
    const b = await kmfleet(['enqueue', '--spec', file, '--k', '32', '--job-id', 'daily-1']);
    expect(b).toMatchObject({ code: 0, stdout: 'job daily-1 already exists (not enqueued again)\n' });
    const c = await kmfleet(['enqueue', '--spec', file, '--k', '33', '--job-id', 'daily-1']);
    expect(c.stderr).toMatch(/warning: job daily-1 already exists with a DIFFERENT spec/);
    const s = await kmfleet(['status', 'daily-1', '--json']);
    expect(s.code).toBe(0);
    const info = JSON.parse(s.stdout);
    expect(info).toMatchObject({ id: 'daily-1', state: 'waiting' });
    expect(info.spec).toMatchObject({ k: 32, seed: 7, dataset: { format: 'f32', dims: 16 } });
    const human = await kmfleet(['status', 'daily-1']);
    expect(human.stdout).toMatch(/^job daily-1: waiting\n  spec      k=32 metric=l2/);
    writeFileSync(join(tmp, 'bad.json'), '{ k: 3');
    const [missing, badJson, badId] = await Promise.all([
      kmfleet(['enqueue', '--spec', join(tmp, 'missing.json')]),
      kmfleet(['enqueue', '--spec', join(tmp, 'bad.json')]),
      kmfleet(['enqueue', ...specFlags, '--job-id', '123']),
    ]);
    expect(missing.code).toBe(2);
    expect(badJson).toMatchObject({ code: 2 });
    expect(badJson.stderr).toMatch(/not valid JSON/);
    expect(badId.code).toBe(2);
    expect(badId.stderr).toMatch(/job id "123" must be/);
  });

  it('--wait follows the job to its result (plain progress lines when not on a terminal)', async () => {
    freshPrefix();
    await worker({ iterationMs: 20 });
    const r = await kmfleet(['enqueue', ...specFlags, '--max-iter', '5', '--name', 'emb', '--job-id', 'w1', '--wait']);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/^enqueued job w1\nwaiting for job w1\n/);
    expect(r.stderr).not.toContain('\r');
    expect(r.stdout).toMatch(/^job w1: completed\n  result    5 iterations, stopped at maxIter; inertia .*\n  centroids s3:\/\/out-bkt\/runs\/w1\/centroids\.npy/);
  });
});

describe('kmfleet status / wait', () => {
  it('status of an unknown job fails with exit 1', async () => {
    freshPrefix();
    const r = await kmfleet(['status', 'nope']);
    expect(r).toMatchObject({ code: 1, stdout: '' });
    expect(r.stderr).toBe('kmfleet: error: job nope not found (never enqueued, removed, or expired)\n');
  });

  it('wait --json prints the result; a failed job exits 1 with its reason; --timeout exits 4', async () => {
    freshPrefix();
    await worker({ failWith: { message: 'dataset header is not npy', attempts: [1], unrecoverable: true }, iterationMs: 5 });
    const bad = await sdk().enqueue({ dataset: { uri: 's3://data-bkt/x.npy' }, k: 3, output: 's3://out-bkt', maxIter: 3 });
    const r1 = await kmfleet(['wait', bad.id, '--json']);
    expect(r1.code).toBe(1);
    expect(r1.stdout).toBe('');
    expect(r1.stderr).toMatch(new RegExp(`kmfleet: error: job ${bad.id} failed after 1 attempt: dataset header is not npy\n$`));
    freshPrefix();
    const pending = await sdk().enqueue({ dataset: { uri: 's3://data-bkt/x.npy' }, k: 3, output: 's3://out-bkt' });
    const r2 = await kmfleet(['wait', pending.id, '--timeout', '300']);
    expect(r2.code).toBe(4);
    expect(r2.stderr).toMatch(/timed out after 300 ms waiting for job .* \(still waiting\)/);
    freshPrefix();
    const done = await sdk().enqueue({ dataset: { uri: 's3://data-bkt/x.npy' }, k: 3, output: 's3://out-bkt', maxIter: 4 }, { jobId: 'done-1' });
    await worker({ iterationMs: 5 });
    const r3 = await kmfleet(['wait', done.id, '--json']);
    expect(r3.code).toBe(0);
    expect(JSON.parse(r3.stdout)).toMatchObject({ jobId: 'done-1', iterations: 4, k: 3 });
    // --json progress goes to stderr as JSON lines
    for (const line of r3.stderr.trim().split('\n').filter(Boolean)) expect(JSON.parse(line).event).toBe('progress');
  });

  it('draws a live progress bar on a terminal', async () => {
    freshPrefix();
    const { id } = await sdk().enqueue({ dataset: { uri: 's3://data-bkt/x.npy' }, k: 3, output: 's3://out-bkt', maxIter: 30 });
    const cmd = `${process.execPath} ${bin} wait ${id}`;
    let attached!: () => void;
    const listening = new Promise<void>((resolve) => (attached = resolve));
    const out = new Promise<Run>((resolve) => {
      const child = execFile('script', ['-qec', cmd, '/dev/null'], { env: { ...process.env, REDIS_URL: server.url, KMFLEET_PREFIX: prefix }, timeout: 30_000 },
        (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
      let seen = '';
      child.stdout!.on('data', (d) => (seen += d) && /waiting for job/.test(seen) && attached());
    });
    // the worker starts once the CLI is listening: on a loaded machine the whole job could otherwise end first
    await Promise.race([listening, out]);
    await worker({ iterationMs: 60 });
    const run = await out;
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('\r\x1b[2K');
    expect(run.stdout).toMatch(/\r\x1b\[2K\[#+\.*\] \d+\/30 · inertia [\d.e+]+ · reassigned [\d.]+% · ETA [\d.]+s\r/);
    expect(run.stdout).toMatch(/job .*: completed/);
  });
});

describe('kmfleet cancel', () => {
  it('removes a waiting job; unknown jobs exit 1; a running job stops with --wait', async () => {
    freshPrefix();
    const c = sdk();
    const { id } = await c.enqueue({ dataset: { uri: 's3://data-bkt/x.npy' }, k: 3, output: 's3://out-bkt' });
    const r = await kmfleet(['cancel', id]);
    expect(r).toMatchObject({ code: 0, stdout: `job ${id} cancelled (removed from the queue before it started)\n` });
    expect(await c.get(id)).toBeNull();
    expect((await kmfleet(['cancel', 'ghost'])).code).toBe(1);

    const running = await c.enqueue({ dataset: { uri: 's3://data-bkt/x.npy' }, k: 3, output: 's3://out-bkt', maxIter: 10_000 }, { jobId: 'long-1' });
    const w = await worker({ iterationMs: 10 });
    while (((await c.get(running.id))?.progress?.iteration ?? 0) < 2) await new Promise((res) => setTimeout(res, 10));
    const r2 = await kmfleet(['cancel', 'long-1', '--wait', '--json']);
    expect(r2.code).toBe(0);
    expect(JSON.parse(r2.stdout)).toEqual({ id: 'long-1', outcome: 'signalled', state: 'active', finalState: 'failed' });
    expect(await c.get('long-1')).toMatchObject({ state: 'failed', failedReason: 'cancelled', attemptsMade: 1 });
    expect(w.reached.get('long-1')).toBeLessThan(10_000);
    expect((await kmfleet(['cancel', 'long-1'])).stdout).toBe('job long-1 already failed; nothing to cancel\n');
    // its last report had an ETA; a job that will not go on shows none
    expect((await c.get('long-1'))!.progress!.etaMs).not.toBeNull();
    const status = await kmfleet(['status', 'long-1']);
    expect(status.stdout).toMatch(/\n  progress  iterating · iteration \d+\/10000 · inertia [^\n]*\n/);
    expect(status.stdout).not.toMatch(/ETA/);
  });
});

describe('kmfleet schedule / schedules / unschedule', () => {
  it('creates, lists and removes schedules; refuses bad ones with exit 2', async () => {
    freshPrefix();
    const r = await kmfleet(['schedule', 'nightly', '--cron', '0 3 * * *', '--tz', 'Europe/Berlin', ...specFlags, '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ name: 'nightly', cron: '0 3 * * *', tz: 'Europe/Berlin', spec: { init: 'previous', name: 'nightly', k: 8 } });
    expect((await kmfleet(['schedule', 'hourly', '--every', '3600000', ...specFlags, '--init', 'kmeans++'])).stdout).toMatch(/^scheduled hourly: every 1h00m, next /);
    // a duration as people write it
    expect((await kmfleet(['schedule', 'quarterly', '--every', '15m', ...specFlags, '--json'])).stdout).toMatch(/"every":900000/);
    expect((await kmfleet(['unschedule', 'quarterly'])).code).toBe(0);
    const list = await kmfleet(['schedules', '--json']);
    expect(JSON.parse(list.stdout).map((s: { name: string }) => s.name)).toEqual(['hourly', 'nightly']);
    expect((await kmfleet(['schedules'])).stdout).toMatch(/^hourly: every 1h00m.*\n  k=8 init=kmeans\+\+ .*\nnightly: cron "0 3 \* \* \*" Europe\/Berlin/);
    expect(await kmfleet(['unschedule', 'hourly'])).toMatchObject({ code: 0, stdout: 'unscheduled hourly\n' });
    expect(await kmfleet(['unschedule', 'hourly'])).toMatchObject({ code: 1, stderr: 'kmfleet: error: no schedule named hourly\n' });
    const [noWhen, badEvery, badTz, badSpec] = await Promise.all([
      kmfleet(['schedule', 'x', ...specFlags]),
      kmfleet(['schedule', 'x', '--every', 'soon', ...specFlags]),
      kmfleet(['schedule', 'x', '--cron', '0 3 * * *', '--tz', 'Nowhere/Else', ...specFlags]),
      kmfleet(['schedule', 'x', '--every', '1000', '--k', '0', '--dataset', 's3://data-bkt/x.npy', '--output', 's3://out-bkt']),
    ]);
    for (const r of [noWhen, badEvery, badTz, badSpec]) expect(r.code).toBe(2);
    expect(noWhen.stderr).toMatch(/exactly one of cron or every/);
    expect(badEvery.stderr).toBe('kmfleet: error: every must be a duration such as 15m, 1h, 1h30m, 90s, or a positive number of ms (got "soon")\n');
    expect(badTz.stderr).toMatch(/unknown time zone/);
    expect(badSpec.stderr).toMatch(/invalid job spec.*k:/);
    expect((await kmfleet(['schedules'])).stdout).toMatch(/^nightly: /);
  });
});

describe('kmfleet history', () => {
  it('lists a model\'s results newest first', async () => {
    freshPrefix();
    const c = sdk();
    const redis = await c.connection();
    const mk = (jobId: string, finishedAt: number): JobResult => ({
      jobId, name: 'emb', finishedAt, startedAt: finishedAt - 1000, specHash: 'h', k: 8, iterations: 12, converged: true,
      stopReason: 'tol', inertia: 42.5, emptyClustersReseeded: 0, backend: 'cuda', device: 'NVIDIA H200', precision: 'fp32',
      spec: { version: 1, dataset: { uri: 's3://data-bkt/x.npy', format: 'npy' }, k: 8, metric: 'l2', init: 'previous', maxIter: 300, tol: 1e-4,
        tolReassign: 0, seed: 0, precision: 'auto', output: 's3://out-bkt', name: 'emb', checkpointEvery: 1, backend: 'auto' },
      dataset: { uri: 's3://data-bkt/x.npy', etag: '"e"', format: 'npy', rows: 100, dims: 4 }, timings: { totalMs: 1000 },
      outputs: { prefix: `s3://out-bkt/${jobId}`, centroids: `s3://out-bkt/${jobId}/centroids.npy`, assignments: `s3://out-bkt/${jobId}/assignments.npy`, summary: `s3://out-bkt/${jobId}/summary.json` },
    });
    await recordResult(redis, c.keys, 'emb', mk('r2', Date.UTC(2026, 10, 2)));
    await recordResult(redis, c.keys, 'emb', mk('r3', Date.UTC(2026, 10, 3)));
    await recordResult(redis, c.keys, 'emb', mk('r1', Date.UTC(2026, 10, 1)));
    const j = await kmfleet(['history', 'emb', '--json', '--limit', '2']);
    expect(JSON.parse(j.stdout).map((r: JobResult) => r.jobId)).toEqual(['r3', 'r2']);
    const h = await kmfleet(['history', 'emb']);
    expect(h.stdout.trim().split('\n').map((l) => l.split('  ')[1])).toEqual(['r3', 'r2', 'r1']);
    expect(h.stdout).toMatch(/^2026-11-03T00:00:00.000Z  r3  k=8  iter=12  tol  inertia=42.5000  1.0s  s3:\/\/out-bkt\/r3\/centroids.npy/);
    expect((await kmfleet(['history', 'none'])).stdout).toBe('no results for model none\n');
    expect((await kmfleet(['history', 'emb', '--limit', '0'])).code).toBe(2);
  });
});

describe('global options', () => {
  it('--redis-url, --prefix and --queue may come before the command', async () => {
    freshPrefix();
    const { id } = await sdk().enqueue({ dataset: { uri: 's3://data-bkt/x.npy' }, k: 3, output: 's3://out-bkt' });
    // the environment points elsewhere: only the options can find the job
    const env = { REDIS_URL: 'redis://127.0.0.1:1', KMFLEET_PREFIX: 'elsewhere' };
    const before = await kmfleet(['--redis-url', server.url, '--prefix', prefix, '--queue', 'jobs', 'status', id, '--json'], env);
    expect(before.code, before.stderr).toBe(0);
    expect(JSON.parse(before.stdout)).toMatchObject({ id, state: 'waiting' });
    const after = await kmfleet(['status', id, '--json', '--redis-url', server.url, '--prefix', prefix], env);
    expect(JSON.parse(after.stdout)).toMatchObject({ id });
    const elsewhere = await kmfleet(['--prefix', 'nobody', '--redis-url', server.url, 'status', id]);
    expect(elsewhere).toMatchObject({ code: 1, stderr: `kmfleet: error: job ${id} not found (never enqueued, removed, or expired)\n` });
  });
});

describe('connection errors', () => {
  it('Redis down: one line, exit 3, no password; a malformed REDIS_URL: exit 2', async () => {
    const down = await kmfleet(['status', 'x'], { REDIS_URL: 'redis://:hunter2@127.0.0.1:1' });
    expect(down.code).toBe(3);
    expect(down.stderr).toMatch(/^kmfleet: error: cannot use Redis at redis:\/\/127\.0\.0\.1:1: connect ECONNREFUSED.*\n$/);
    expect(down.stderr).not.toContain('hunter2');
    const bad = await kmfleet(['status', 'x'], { REDIS_URL: 'redis//hunter2@nowhere' });
    expect(bad.code).toBe(2);
    expect(bad.stderr).not.toContain('hunter2');
    const pw = await startRedisServer({ password: 'hunter2' });
    try {
      const noPw = await kmfleet(['status', 'x'], { REDIS_URL: `redis://127.0.0.1:${pw.port}` });
      expect(noPw.code).toBe(3);
      expect(noPw.stderr).toMatch(/NOAUTH|password/i);
      const withPw = await kmfleet(['status', 'x', '--redis-url', pw.url]);
      expect(withPw).toMatchObject({ code: 1, stderr: 'kmfleet: error: job x not found (never enqueued, removed, or expired)\n' });
    } finally {
      await pw.stop();
    }
  });

  it('rediss:// from REDIS_URL: TLS with the CA from NODE_EXTRA_CA_CERTS, password never printed', async () => {
    const t = await startRedisServer({ tls: true, password: 'hunter2' });
    try {
      const env = { REDIS_URL: t.url, NODE_EXTRA_CA_CERTS: join(t.dir, 'tls.crt') };
      const [ok, untrusted] = await Promise.all([
        kmfleet(['enqueue', ...specFlags, '--job-id', 'tls-1', '--json'], env),
        kmfleet(['status', 'tls-1'], { REDIS_URL: t.url }),
      ]);
      expect(ok.code).toBe(0);
      expect(JSON.parse(ok.stdout)).toMatchObject({ id: 'tls-1', created: true });
      expect(untrusted.code).toBe(3);
      expect(untrusted.stderr).toMatch(/^kmfleet: error: cannot use Redis at rediss:\/\/127\.0\.0\.1:\d+: .*(self-signed|certificate)/);
      expect(untrusted.stderr).not.toContain('hunter2');
    } finally {
      await t.stop();
    }
  });
});
