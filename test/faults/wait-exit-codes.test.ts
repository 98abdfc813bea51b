/**
 * `kmfleet wait` tells its outcomes apart by exit code, so a script can act on each (cli/main.ts): the real CLI process
 * against a real redis-server and a real BullMQ worker (the producer tests' simulated one):
 *   0 the job completed · 1 it failed or was cancelled · 3 Redis could not be used: absent from the start, or killed
 *   while the wait runs · 4 --timeout passed (also `enqueue --wait`), and the job is still there, untouched.
 */
import { execFile, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KmfleetClient } from '../../producer/client.js';
import { keyspace } from '../../producer/keys.js';
import { ensureDistBuilt } from '../helpers/dist-build.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';
import { startSimWorker } from '../integration/producer-sim-worker.js';

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'kmfleet.js');
const SPEC = { dataset: { uri: 's3://data/x.npy' }, k: 3, output: 's3://out/runs', maxIter: 3 };

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function kmfleet(args: string[], env: Record<string, string>): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stdout, stderr }),
    );
  });
}

/** A loopback port with nothing listening on it. */
function deadPort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

describe('kmfleet wait: exit codes', () => {
  let redis: RedisServerHandle;
  let client: KmfleetClient;
  let env: Record<string, string>;

  beforeAll(async () => {
    ensureDistBuilt();
    redis = await startRedisServer();
    client = new KmfleetClient({ connection: redis.url, prefix: 'wx' });
    env = { REDIS_URL: redis.url, KMFLEET_PREFIX: 'wx' };
  });
  afterAll(async () => {
    await client?.close();
    await redis?.stop();
  });

  it('Redis absent: 3, one line naming the server', async () => {
    const r = await kmfleet(['wait', 'any-job'], { REDIS_URL: `redis://127.0.0.1:${await deadPort()}`, KMFLEET_REDIS_CONNECT_TIMEOUT_MS: '1000' });
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/\nkmfleet: error: cannot use Redis at redis:\/\/127\.0\.0\.1:\d+: connect ECONNREFUSED.*\n$/);
  });

  it('--timeout passed: 4, and the job is still waiting; enqueue --wait --timeout too', async () => {
    await client.enqueue(SPEC, { jobId: 'pending-1' });
    const r = await kmfleet(['wait', 'pending-1', '--timeout', '300'], env);
    expect(r.code).toBe(4);
    expect(r.stderr).toMatch(/kmfleet: error: timed out after 300 ms waiting for job pending-1 \(still waiting\)/);
    expect((await client.get('pending-1'))?.state).toBe('waiting');
    const e = await kmfleet(['enqueue', '--dataset', 's3://data/x.npy', '--k', '3', '--output', 's3://out/runs', '--job-id', 'pending-2', '--wait', '--timeout', '300'], env);
    expect(e.code).toBe(4);
    expect((await client.get('pending-2'))?.state).toBe('waiting');
    // a bad --timeout is bad input, not a timeout
    expect((await kmfleet(['wait', 'pending-1', '--timeout', 'soon'], env)).code).toBe(2);
    await client.cancel('pending-1');
    await client.cancel('pending-2');
  });

  it('cancel --wait whose job does not stop in time: 4, as wait', async () => {
    // a schedule's upcoming job can't be removed: the cancel is signalled and the job stays queued (no worker here)
    await client.schedule('hourly', { every: 3_600_000 }, SPEC);
    const [upcoming] = await (await client.queue()).getJobs(['waiting', 'delayed', 'prioritized']);
    expect(upcoming).toBeDefined();
    const r = await kmfleet(['cancel', upcoming.id!, '--wait', '--timeout', '300'], env);
    expect(r.code).toBe(4);
    expect(r.stderr).toMatch(/kmfleet: error: timed out after 300 ms waiting for job .* \(still (waiting|delayed)\)/);
    await client.unschedule('hourly');
  });

  it('completed: 0; failed: 1; cancelled: 1', async () => {
    const ok = await startSimWorker(redis.connection, keyspace({ prefix: 'wx' }), { iterationMs: 5 });
    try {
      await client.enqueue(SPEC, { jobId: 'done-1' });
      expect((await kmfleet(['wait', 'done-1'], env)).code).toBe(0);
    } finally {
      await ok.close();
    }
    const bad = await startSimWorker(redis.connection, keyspace({ prefix: 'wx' }), { failWith: { message: 'bad dataset', attempts: [1], unrecoverable: true } });
    try {
      await client.enqueue(SPEC, { jobId: 'failed-1' });
      const r = await kmfleet(['wait', 'failed-1'], env);
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/job failed-1 failed after 1 attempt: bad dataset/);
    } finally {
      await bad.close();
    }
    await client.enqueue(SPEC, { jobId: 'cancelled-1' });
    await client.cancel('cancelled-1');
    const c = await kmfleet(['wait', 'cancelled-1'], env);
    expect(c.code).toBe(1);
    expect(c.stderr).toMatch(/cancelled/);
  });

  it('Redis killed while waiting: 3, not 1 (the job did not fail)', async () => {
    await client.enqueue(SPEC, { jobId: 'orphan-1' });
    const proc = spawn(process.execPath, [BIN, 'wait', 'orphan-1', '--json'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    proc.stderr!.on('data', (d) => (stderr += d));
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    const started = Date.now();
    // the first progress event (--json: printed at once) carries the job's state as read from Redis: the wait reached it
    while (!/"state":"waiting"/.test(stderr)) {
      if (Date.now() - started > 30_000) throw new Error(`wait did not start: ${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    await redis.kill('SIGKILL');
    // the client rides out a Redis blip of up to 10 s (client.ts wait), then gives up
    expect(await exited).toBe(3);
    expect(stderr).toMatch(/kmfleet: error: cannot use Redis at /);
  }, 60_000);
});
