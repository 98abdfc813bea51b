// KmfleetClient against a real redis-server and a real (simulated) BullMQ worker.
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ArgumentError, JobCancelledError, JobFailedError, KmfleetClient, SpecValidationError, WaitTimeoutError, type JobProgress } from '../../producer/index.js';
import { requestCancel, cancelRequested } from '../../producer/cancel.js';
import { readIterations } from '../../producer/job-state.js';
import { CancelListener } from '../../worker/cancel-listener.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';
import { startSimWorker, type SimWorker } from './producer-sim-worker.js';

let server: RedisServerHandle;
let n = 0;
const open: { close(): Promise<void> }[] = [];

beforeAll(async () => {
  server = await startRedisServer();
});
afterAll(async () => {
  await server.stop();
});
afterEach(async () => {
  // Workers first (they hold jobs), then clients.
  for (const c of open.splice(0).reverse()) await c.close();
});

/** A client on its own prefix, so tests never see each other's jobs. */
function client(extra: Partial<ConstructorParameters<typeof KmfleetClient>[0]> = {}): KmfleetClient {
  const c = new KmfleetClient({ connection: server.url, prefix: `t${++n}`, ...extra });
  open.push(c);
  return c;
}
/** Another client (another "process": its own connection) on the same prefix. */
function peer(c: KmfleetClient): KmfleetClient {
  const p = new KmfleetClient({ connection: server.url, prefix: c.keys.prefix });
  open.push(p);
  return p;
}
async function worker(c: KmfleetClient, sim: Parameters<typeof startSimWorker>[2] = {}): Promise<SimWorker> {
  const w = await startSimWorker(server.connection, c.keys, sim);
  open.push(w);
  return w;
}

const spec = (over: Record<string, unknown> = {}) => ({
  dataset: { uri: 's3://data-bkt/x.npy' },
  k: 8,
  output: 's3://out-bkt/runs',
  ...over,
});

describe('enqueue', () => {
  it('validates first: a bad spec names every bad field and enqueues nothing', async () => {
    const c = client();
    const err = await c.enqueue({ dataset: { uri: 'x' }, k: -1, output: 's3://out-bkt' }).catch((e) => e);
    expect(err).toBeInstanceOf(SpecValidationError);
    expect(err.message).toMatch(/dataset\.uri.*k:/);
    expect(await (await c.queue()).count()).toBe(0);
  });

  it('is idempotent by job id: the same key never makes two jobs', async () => {
    const c = client();
    const first = await c.enqueue(spec(), { jobId: 'nightly-1' });
    expect(first).toMatchObject({ id: 'nightly-1', created: true, sameSpec: true });
    // Per-job state of an EXISTING job survives a repeated enqueue (only a free id starts clean).
    await requestCancel(await c.connection(), c.keys, 'nightly-1', 'keep me');
    const again = await c.enqueue(spec(), { jobId: 'nightly-1' });
    expect(again).toMatchObject({ id: 'nightly-1', created: false, sameSpec: true });
    expect(await cancelRequested(await c.connection(), c.keys, 'nightly-1')).toBe('keep me');
    // From another process at the same time: still one job.
    const p = peer(c);
    const racers = await Promise.all([p.enqueue(spec({ k: 9 }), { jobId: 'nightly-2' }), c.enqueue(spec({ k: 9 }), { jobId: 'nightly-2' })]);
    expect(racers.filter((h) => h.created)).toHaveLength(1);
    const other = await c.enqueue(spec({ k: 16 }), { jobId: 'nightly-1' });
    expect(other).toMatchObject({ created: false, sameSpec: false });
    expect(await (await c.queue()).count()).toBe(2);
    expect((await c.get('nightly-1'))!.spec!.k).toBe(8);
  });

  it('gives each job a unique default id and a priority (BullMQ keeps both in its prioritized set)', async () => {
    const c = client();
    const a = await c.enqueue(spec());
    const b = await c.enqueue(spec(), { priority: 5 });
    expect(a.id).not.toBe(b.id);
    expect(a.id).toMatch(/^[0-9a-f-]{36}$/);
    const queue = await c.queue();
    expect(await queue.getJobCounts('waiting', 'prioritized')).toEqual({ waiting: 0, prioritized: 2 });
    expect(((await queue.getJob(a.id))!).opts.priority).toBe(1000);
    expect((await c.get(b.id))!.state).toBe('waiting');
    await expect(c.enqueue(spec(), { jobId: '42' })).rejects.toBeInstanceOf(ArgumentError);
    await expect(c.enqueue(spec(), { jobId: 'a:b' })).rejects.toBeInstanceOf(ArgumentError);
    await expect(c.enqueue(spec(), { priority: -1 })).rejects.toThrow(/priority/);
  });
});

describe('get and wait', () => {
  it('get: null for an unknown job, the spec and state for a waiting one', async () => {
    const c = client();
    expect(await c.get('nope')).toBeNull();
    const { id } = await c.enqueue(spec({ name: 'emb' }));
    const info = await c.get(id);
    expect(info).toMatchObject({ id, state: 'waiting', progress: null, result: null, failedReason: null, attemptsMade: 0, cancelRequested: null });
    expect(info!.spec).toMatchObject({ k: 8, name: 'emb', metric: 'l2' });
    expect(info!.timestamps.createdAt).toBeGreaterThan(0);
  });

  it('wait: reports progress and resolves with the result; iterations land in the stream', async () => {
    const c = client();
    const { id } = await c.enqueue(spec({ maxIter: 6 }));
    await worker(c, { iterationMs: 30 });
    const seen: JobProgress[] = [];
    const result = await c.wait(id, { onProgress: (p) => seen.push(p), pollMs: 20, timeoutMs: 20_000 });
    expect(result).toMatchObject({ jobId: id, iterations: 6, stopReason: 'maxIter', k: 8 });
    expect(seen.length).toBeGreaterThan(1);
    const its = seen.map((p) => p.iteration);
    expect([...its].sort((a, b) => a - b)).toEqual(its);
    expect(seen.at(-1)).toMatchObject({ phase: 'iterating', maxIter: 6 });
    expect(seen.at(-1)!.reassignedFraction).toBeCloseTo(seen.at(-1)!.reassigned! / 1000);
    const info = await c.get(id);
    expect(info).toMatchObject({ state: 'completed', attemptsMade: 1 });
    expect(info!.result!.jobId).toBe(id);
    const hist = await readIterations(await c.connection(), c.keys, id);
    expect(hist.map((r) => r.iteration)).toEqual([1, 2, 3, 4, 5, 6]);
    // A waiter that comes late (the job is already done) resolves at once: nothing depends on live events.
    expect((await peer(c).wait(id)).jobId).toBe(id);
  });

  it('wait: rejects with the failure reason once retries are spent', async () => {
    const c = client({ jobOptions: { attempts: 2, backoff: { type: 'fixed', delay: 10 } } });
    const { id } = await c.enqueue(spec({ maxIter: 2 }));
    await worker(c, { failWith: { message: 'S3 said no', attempts: [1, 2] } });
    const err = await c.wait(id, { pollMs: 20, timeoutMs: 20_000 }).catch((e) => e);
    expect(err).toBeInstanceOf(JobFailedError);
    expect(err.message).toBe(`job ${id} failed after 2 attempts: S3 said no`);
  });

  it('wait: times out with a clear error while the job goes on', async () => {
    const c = client();
    const { id } = await c.enqueue(spec());
    const err = await c.wait(id, { timeoutMs: 150, pollMs: 20 }).catch((e) => e);
    expect(err).toBeInstanceOf(WaitTimeoutError);
    expect(err.message).toMatch(/timed out after 150 ms .* \(still waiting\)/);
    expect((await c.get(id))!.state).toBe('waiting');
  });
});

describe('cancel', () => {
  it('removes a waiting job, and wait() reports it cancelled', async () => {
    const c = client();
    const { id } = await c.enqueue(spec());
    expect(await peer(c).cancel(id)).toEqual({ id, outcome: 'removed', state: 'waiting' });
    expect(await c.get(id)).toBeNull();
    await expect(c.wait(id)).rejects.toBeInstanceOf(JobCancelledError);
    const w = await worker(c);
    await new Promise((r) => setTimeout(r, 200));
    expect(w.started).toHaveLength(0);
    // The id is free again: enqueueing it anew makes a job that runs (the old cancel flag does not stick to it).
    expect(await c.enqueue(spec({ maxIter: 2 }), { jobId: id })).toMatchObject({ created: true });
    expect((await c.wait(id, { pollMs: 20, timeoutMs: 10_000 })).iterations).toBe(2);
  });

  it('stops an active job from another process: failed "cancelled", no retry, no result', async () => {
    const c = client({ jobOptions: { attempts: 3 } });
    const { id } = await c.enqueue(spec({ maxIter: 10_000, name: 'cancel-me' }));
    const w = await worker(c, { iterationMs: 10 });
    while (((await c.get(id))?.progress?.iteration ?? 0) < 3) await new Promise((r) => setTimeout(r, 10));

    const res = await peer(c).cancel(id);
    expect(res).toEqual({ id, outcome: 'signalled', state: 'active' });
    await expect(c.wait(id, { timeoutMs: 10_000, pollMs: 20 })).rejects.toBeInstanceOf(JobCancelledError);
    const info = await c.get(id);
    expect(info).toMatchObject({ state: 'failed', failedReason: 'cancelled', attemptsMade: 1, cancelRequested: 'cancelled', result: null });
    expect(w.reached.get(id)).toBeLessThan(10_000);
    expect(w.started.filter((s) => s.id === id)).toHaveLength(1);
    expect(await c.history('cancel-me')).toEqual([]);
  });

  it('a cancel that lands before the worker takes the job still stops it (the flag outlives the message)', async () => {
    const c = client();
    const { id } = await c.enqueue(spec({ maxIter: 10_000 }));
    // Simulate the race "a worker takes the job between our state check and the remove": set the flag only.
    await requestCancel(await c.connection(), c.keys, id);
    const w = await worker(c, { iterationMs: 10 });
    await expect(c.wait(id, { timeoutMs: 10_000, pollMs: 20 })).rejects.toBeInstanceOf(JobCancelledError);
    expect(w.reached.get(id) ?? 0).toBeLessThanOrEqual(1);
  });

  it('CancelListener: the message aborts at once; a lost message is caught by the poll; dispose stops watching', async () => {
    const c = client();
    const r = await c.connection();
    const own = new Redis(server.url);
    const listener = new CancelListener(own, c.keys, { pollMs: 100 });
    await listener.start();
    try {
      const a = listener.watch('a');
      const b = listener.watch('b');
      const gone = listener.watch('gone');
      gone.dispose();
      const abortedA = new Promise((res) => a.signal.addEventListener('abort', res));
      await requestCancel(r, c.keys, 'a', 'operator said stop');
      await abortedA;
      expect(a.signal.reason).toBe('operator said stop');
      expect(b.signal.aborted).toBe(false);
      // No PUBLISH (as if the message was lost in a reconnect): only the flag.
      await r.set(c.keys.cancel('b'), 'cancelled');
      await r.set(c.keys.cancel('gone'), 'cancelled');
      await new Promise((res) => b.signal.addEventListener('abort', res));
      expect(b.signal.reason).toBe('cancelled');
      expect(gone.signal.aborted).toBe(false);
    } finally {
      await listener.close();
      own.disconnect();
    }
  });

  it('leaves finished jobs alone and says when there is no such job', async () => {
    const c = client();
    const { id } = await c.enqueue(spec({ maxIter: 1 }));
    await worker(c);
    await c.wait(id, { pollMs: 20, timeoutMs: 10_000 });
    expect(await c.cancel(id)).toEqual({ id, outcome: 'already-finished', state: 'completed' });
    expect(await cancelRequested(await c.connection(), c.keys, id)).toBeNull();
    expect(await c.cancel('ghost')).toEqual({ id: 'ghost', outcome: 'not-found', state: null });
  });
});

describe('schedules', () => {
  it('an `every` schedule fires repeatedly; each run warm-starts from the previous result', async () => {
    const c = client();
    const w = await worker(c, { iterationMs: 5 });
    const info = await c.schedule('nightly-emb', { every: 300 }, spec({ maxIter: 2 }));
    expect(info).toMatchObject({ name: 'nightly-emb', every: 300, cron: null });
    expect(info.spec).toMatchObject({ init: 'previous', name: 'nightly-emb' });
    expect((await c.schedules()).map((s) => s.name)).toEqual(['nightly-emb']);

    const deadline = Date.now() + 10_000;
    while ((await c.history('nightly-emb')).length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(await c.unschedule('nightly-emb')).toBe(true);
    expect(await c.unschedule('nightly-emb')).toBe(false);
    expect(await c.schedules()).toEqual([]);

    const runs = w.started.filter((s) => s.data.scheduler === 'nightly-emb');
    expect(runs.length).toBeGreaterThanOrEqual(2);
    for (const r of runs) {
      expect(r.id).toMatch(/^repeat:nightly-emb:\d+$/);
      expect(r.data.spec).toMatchObject({ init: 'previous', name: 'nightly-emb', maxIter: 2 });
    }
    const [newest, older] = await c.history('nightly-emb');
    expect(newest.initFrom).toBe(older.outputs.centroids);
  });

  it("cancelling a schedule's upcoming job cancels that run only; the schedule goes on", async () => {
    const c = client();
    await c.schedule('sch', { every: 400 }, spec({ maxIter: 1 }));
    const [next] = await (await c.queue()).getJobs(['waiting', 'delayed', 'prioritized']);
    // BullMQ refuses to remove a scheduler's job (the schedule would stop): the run is flagged instead.
    expect(await c.cancel(next.id!)).toMatchObject({ id: next.id, outcome: 'signalled' });
    await worker(c, { iterationMs: 5 });
    await expect(c.wait(next.id!, { pollMs: 20, timeoutMs: 10_000 })).rejects.toBeInstanceOf(JobCancelledError);
    const deadline = Date.now() + 10_000;
    while ((await c.history('sch')).length < 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const [later] = await c.history('sch');
    expect(later.jobId).not.toBe(next.id);
    expect(later.jobId).toMatch(/^repeat:sch:/);
    await c.unschedule('sch');
  });

  it('cron schedules keep their time zone; bad schedules are refused before Redis', async () => {
    const c = client();
    const s = await c.schedule('weekly', { cron: '0 3 * * 1', tz: 'Europe/Berlin' }, spec({ init: 'kmeans++' }));
    expect(s).toMatchObject({ name: 'weekly', cron: '0 3 * * 1', tz: 'Europe/Berlin', every: null });
    expect(s.spec!.init).toBe('kmeans++');
    expect(s.next).toBeGreaterThan(Date.now());
    // Scheduling the same name again replaces it (new pattern and spec), never adds a second schedule.
    const again = await c.schedule('weekly', { cron: '30 4 * * 2', tz: 'UTC' }, spec({ init: 'kmeans++', k: 9 }));
    expect(again).toMatchObject({ name: 'weekly', cron: '30 4 * * 2', tz: 'UTC' });
    expect((await c.schedules()).map((x) => [x.name, x.spec!.k])).toEqual([['weekly', 9]]);
    await expect(c.schedule('x', { cron: '0 3 * * 1', every: 5 }, spec())).rejects.toThrow(/exactly one of cron or every/);
    await expect(c.schedule('x', { cron: '0 3 * *' }, spec())).rejects.toThrow(/5 fields/);
    await expect(c.schedule('x', { cron: '0 3 * * 1', tz: 'Mars/Olympus' }, spec())).rejects.toThrow(/time zone/);
    await expect(c.schedule('x', { cron: '99 3 * * 1' }, spec())).rejects.toBeInstanceOf(ArgumentError);
    await expect(c.schedule('bad name', { every: 1000 }, spec())).rejects.toThrow(/schedule name/);
    await expect(c.schedule('x', { every: 1000 }, spec({ k: 0 }))).rejects.toBeInstanceOf(SpecValidationError);
    expect((await c.schedules()).map((x) => x.name)).toEqual(['weekly']);
  });
});

describe('connection failures', () => {
  it('fails fast with a clear message when Redis is down', async () => {
    const c = new KmfleetClient({ connection: 'redis://:hunter2@127.0.0.1:1', connectTimeoutMs: 1000 });
    const t0 = Date.now();
    const err = await c.enqueue(spec()).catch((e) => e);
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(err.name).toBe('RedisUnavailableError');
    expect(err.message).toMatch(/redis:\/\/127\.0\.0\.1:1.*ECONNREFUSED.*REDIS_URL/);
    expect(err.message).not.toContain('hunter2');
    await c.close();
  });

  it('a client whose Redis goes away answers with RedisUnavailableError, not a hang', async () => {
    const s = await startRedisServer();
    const c = new KmfleetClient({ connection: s.url });
    try {
      await c.enqueue(spec(), { jobId: 'before' });
      await s.kill('SIGKILL');
      const err = await c.get('before').catch((e) => e);
      expect(err.name).toBe('RedisUnavailableError');
    } finally {
      await c.close();
      await s.stop();
    }
  });

  it('wait() rides out a Redis restart (AOF keeps the job) and still gets the result', async () => {
    const s = await startRedisServer({ appendonly: true });
    const c = new KmfleetClient({ connection: s.url, prefix: 'restart' });
    try {
      const { id } = await c.enqueue(spec({ maxIter: 3 }), { jobId: 'survivor' });
      const seen: string[] = [];
      const waiting = c.wait(id, { pollMs: 50, timeoutMs: 20_000, onProgress: (_p, state) => seen.push(state) });
      await new Promise((r) => setTimeout(r, 150));
      await s.kill('SIGKILL');
      await new Promise((r) => setTimeout(r, 500)); // a few polls fail while it is down
      await s.restart();
      const w = await startSimWorker(s.connection, c.keys, { iterationMs: 5 });
      try {
        expect((await waiting).iterations).toBe(3);
      } finally {
        await w.close();
      }
      expect(seen[0]).toBe('waiting');
    } finally {
      await c.close();
      await s.stop();
    }
  });

  it('works against a password-protected Redis and refuses a wrong password without echoing it', async () => {
    const s = await startRedisServer({ password: 's3cr3t/pw' });
    try {
      const good = new KmfleetClient({ connection: s.url, prefix: 'pw' });
      open.push(good);
      const { id } = await good.enqueue(spec());
      expect((await good.get(id))!.state).toBe('waiting');
      const bad = new KmfleetClient({ connection: `redis://:wrong-hunter2@127.0.0.1:${s.port}` });
      const err = await bad.get(id).catch((e) => e);
      await bad.close();
      expect(err.name).toBe('RedisUnavailableError');
      expect(err.message).toMatch(/WRONGPASS|password/i);
      expect(err.message).not.toContain('hunter2');
    } finally {
      for (const c of open.splice(0)) await c.close();
      await s.stop();
    }
  });

  it('talks TLS to a rediss:// server (parseRedisUrl options + the CA)', async () => {
    const s = await startRedisServer({ tls: true, password: 'pw' });
    const { parseRedisUrl } = await import('../../producer/connection.js');
    const opts = parseRedisUrl(s.url);
    expect(opts.tls).toEqual({});
    const c = new KmfleetClient({ connection: { ...opts, tls: { ...opts.tls, ca: s.tlsCa } } });
    try {
      const { id } = await c.enqueue(spec());
      expect((await c.get(id))!.state).toBe('waiting');
      expect(c.where).toBe(`rediss://127.0.0.1:${s.port}`);
    } finally {
      await c.close();
      await s.stop();
    }
  });

  it('shares a caller-owned ioredis connection without closing it', async () => {
    const r = new Redis(server.url);
    const c = new KmfleetClient({ connection: r, prefix: 'shared' });
    await c.enqueue(spec(), { jobId: 'x1' });
    await c.close();
    expect(await r.ping()).toBe('PONG');
    const q = new Queue('jobs', { connection: r, prefix: '{shared}' });
    expect(await q.getJobCountByTypes('waiting', 'prioritized')).toBe(1);
    await q.close();
    r.disconnect();
  });
});
