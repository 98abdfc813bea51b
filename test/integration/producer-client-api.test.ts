// The SDK's waiting and job-handling surface against a real redis-server and real (simulated) BullMQ workers: wait()
// woken by queue events, abort signals, progress as an async iterator, list / retry / remove, and the priority order.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { JobCancelledError, JobFailedError, KmfleetClient, WaitTimeoutError, type JobProgress, type ProgressUpdate } from '../../producer/index.js';
import { requestCancel } from '../../producer/cancel.js';
import { readIterations } from '../../producer/job-state.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';
import { startSimWorker, type SimOptions, type SimWorker } from './producer-sim-worker.js';

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
  for (const c of open.splice(0).reverse()) await c.close();
});

function client(extra: Partial<ConstructorParameters<typeof KmfleetClient>[0]> = {}): KmfleetClient {
  const c = new KmfleetClient({ connection: server.url, prefix: `api${++n}`, ...extra });
  open.push(c);
  return c;
}
async function worker(c: KmfleetClient, sim: SimOptions = {}): Promise<SimWorker> {
  const w = await startSimWorker(server.connection, c.keys, sim);
  open.push(w);
  return w;
}
const spec = (over: Record<string, unknown> = {}) => ({ dataset: { uri: 's3://data-bkt/x.npy' }, k: 8, output: 's3://out-bkt/runs', ...over });
const HOUR = 3_600_000;

/**
 * The iterations of the `iterating` reports in order. A report comes again only when the job's state changed under
 * it (the last iteration read once while active and once completed, when the waiter reads between the two).
 */
function iteratingSeen(reports: { iteration: number; phase: string; state: string }[]): number[] {
  const iterating = reports.filter((r) => r.phase === 'iterating');
  iterating.forEach((r, i) => {
    if (i > 0 && r.iteration === iterating[i - 1]!.iteration) expect(r.state).not.toBe(iterating[i - 1]!.state);
  });
  return iterating.map((r) => r.iteration).filter((it, i, all) => i === 0 || it !== all[i - 1]);
}

describe('wait', () => {
  it("is woken by the queue's events: with no poll in sight it still follows every iteration to the result", async () => {
    const c = client();
    const { id } = await c.enqueue(spec({ maxIter: 5 }));
    const seen: [JobProgress, string][] = [];
    const waiting = c.wait(id, { pollMs: HOUR, onProgress: (p, state) => seen.push([p, state]) });
    await new Promise((r) => setTimeout(r, 100)); // the waiter has read the job once: only an event can wake it now
    await worker(c, { iterationMs: 40 });
    expect(await waiting).toMatchObject({ jobId: id, iterations: 5 });
    // never null: before the worker's first report, a `queued` one
    expect(seen[0]).toEqual([expect.objectContaining({ phase: 'queued', iteration: 0, maxIter: 5, inertia: null, etaMs: null }), 'waiting']);
    expect(iteratingSeen(seen.map(([p, state]) => ({ ...p, state })))).toEqual([1, 2, 3, 4, 5]);
  });

  it('an aborted signal rejects with an AbortError carrying its reason, not a timeout; the job goes on', async () => {
    const c = client();
    const { id } = await c.enqueue(spec());
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('user went home')), 100);
    const err = await c.wait(id, { signal: ac.signal, pollMs: HOUR }).catch((e) => e);
    expect(err).not.toBeInstanceOf(WaitTimeoutError);
    expect(err).toMatchObject({ name: 'AbortError', cause: new Error('user went home') });
    expect(err.message).toBe(`waiting for job ${id} was aborted`);
    // already aborted: at once, without reading anything
    const again = await c.wait(id, { signal: AbortSignal.abort() }).catch((e) => e);
    expect(again.name).toBe('AbortError');
    expect((await c.get(id))!.state).toBe('waiting');
    // its own timeout is still a WaitTimeoutError
    await expect(c.wait(id, { timeoutMs: 50 })).rejects.toBeInstanceOf(WaitTimeoutError);
  });
});

describe('progress()', () => {
  it('yields each report with its state and ends when the job completes', async () => {
    const c = client();
    const { id } = await c.enqueue(spec({ maxIter: 4 }));
    const got: ProgressUpdate[] = [];
    const following = (async () => {
      for await (const p of c.progress(id)) got.push(p);
    })();
    await new Promise((r) => setTimeout(r, 100));
    await worker(c, { iterationMs: 30 });
    await following;
    expect(got[0]).toMatchObject({ state: 'waiting', phase: 'queued', iteration: 0 });
    expect(iteratingSeen(got)).toEqual([1, 2, 3, 4]);
    expect(got.at(-1)).toMatchObject({ state: 'completed', iteration: 4 });
  });

  it('throws what wait() throws when the job fails; leaving the loop early stops listening', async () => {
    const c = client({ jobOptions: { attempts: 1 } });
    const failing = await c.enqueue(spec({ maxIter: 2 }));
    await worker(c, { failWith: { message: 'no such key', attempts: [1] } });
    const err = await (async () => {
      for await (const _ of c.progress(failing.id)) { /* drain */ }
    })().catch((e) => e);
    expect(err).toBeInstanceOf(JobFailedError);
    expect(err.failedReason).toBe('no such key');

    const slow = await c.enqueue(spec({ maxIter: 10_000 }));
    let first: ProgressUpdate | undefined;
    for await (const p of c.progress(slow.id)) {
      first = p;
      break;
    }
    expect(first?.iteration).toBeGreaterThanOrEqual(0);
    await c.cancel(slow.id);
  });
});

describe('list, retry, remove', () => {
  it('list: state by state, waiting jobs in the order they will run, at most limit', async () => {
    const c = client();
    await c.enqueue(spec({ maxIter: 2 }), { jobId: 'a' });
    await c.enqueue(spec({ maxIter: 2 }), { jobId: 'b', priority: 1 });
    await c.enqueue(spec({ maxIter: 2 }), { jobId: 'c' });
    await c.enqueue(spec(), { jobId: 'later', delayMs: HOUR });
    expect((await c.list()).map((j) => [j.id, j.state])).toEqual([['b', 'waiting'], ['a', 'waiting'], ['c', 'waiting'], ['later', 'delayed']]);
    expect((await c.list({ states: ['delayed', 'waiting'], limit: 2 })).map((j) => j.id)).toEqual(['later', 'b']);
    expect(await c.list({ states: ['completed', 'failed'] })).toEqual([]);
    await requestCancel(await c.connection(), c.keys, 'a', 'not today');
    const [a] = (await c.list({ states: ['waiting'] })).filter((j) => j.id === 'a');
    expect(a).toMatchObject({ id: 'a', spec: { k: 8 }, progress: null, cancelRequested: 'not today' });
    await expect(c.list({ states: ['nope' as 'waiting'] })).rejects.toThrow(/cannot list jobs in state "nope"/);

    await worker(c, { concurrency: 1, iterationMs: 5 });
    for (const id of ['b', 'c']) await c.wait(id);
    expect((await c.list({ states: ['completed'] })).map((j) => j.id)).toEqual(['c', 'b']); // latest first
  });

  it('retry: a failed job runs again with fresh attempts; a cancelled one too, its cancel flag cleared', async () => {
    const c = client({ jobOptions: { attempts: 1 } });
    const sim: SimOptions = { iterationMs: 20, failWith: { message: 'S3 was down', attempts: [1] } };
    await worker(c, sim);
    const { id } = await c.enqueue(spec({ maxIter: 3 }));
    await expect(c.wait(id)).rejects.toBeInstanceOf(JobFailedError);
    expect(await c.retry('nope')).toEqual({ id: 'nope', outcome: 'not-found', state: null });
    delete sim.failWith; // the outage is over
    expect(await c.retry(id)).toEqual({ id, outcome: 'retried', state: 'failed' });
    expect(await c.wait(id)).toMatchObject({ jobId: id, iterations: 3 });
    expect(await c.retry(id)).toEqual({ id, outcome: 'not-failed', state: 'completed' });

    const cancelled = await c.enqueue(spec({ maxIter: 3 }), { jobId: 'cancelled-1', delayMs: HOUR });
    await requestCancel(await c.connection(), c.keys, cancelled.id); // flag first: the worker fails it as cancelled
    await (await c.queue()).getJob(cancelled.id).then((j) => j!.promote());
    await expect(c.wait(cancelled.id)).rejects.toBeInstanceOf(JobCancelledError);
    expect((await c.retry(cancelled.id)).outcome).toBe('retried');
    expect(await c.wait(cancelled.id)).toMatchObject({ jobId: cancelled.id, iterations: 3 });
  });

  it('remove: a waiting or finished job and its per-job keys; never a running one', async () => {
    const c = client();
    const waiting = await c.enqueue(spec());
    expect(await c.remove(waiting.id)).toEqual({ id: waiting.id, outcome: 'removed', state: 'waiting' });
    expect(await c.get(waiting.id)).toBeNull();
    expect(await c.remove(waiting.id)).toEqual({ id: waiting.id, outcome: 'not-found', state: null });

    const w = await worker(c, { iterationMs: 50 });
    const done = await c.enqueue(spec({ maxIter: 2 }));
    await c.wait(done.id);
    expect((await readIterations(await c.connection(), c.keys, done.id)).length).toBe(2);
    expect((await c.remove(done.id)).outcome).toBe('removed');
    expect(await readIterations(await c.connection(), c.keys, done.id)).toEqual([]);

    const running = await c.enqueue(spec({ maxIter: 10_000 }));
    for await (const p of c.progress(running.id)) if (p.state === 'active') break;
    expect(await c.remove(running.id)).toEqual({ id: running.id, outcome: 'active', state: 'active' });
    expect((await c.get(running.id))!.state).toBe('active');
    await c.cancel(running.id);
    await expect(c.wait(running.id)).rejects.toBeInstanceOf(JobCancelledError);
    expect(w.started.map((s) => s.id)).toContain(running.id);
  });
});

describe('priority', () => {
  it('1 runs first, then jobs without a priority in the order they came, then lower priorities', async () => {
    const c = client();
    await c.enqueue(spec({ maxIter: 1 }), { jobId: 'plain-1' });
    await c.enqueue(spec({ maxIter: 1 }), { jobId: 'low', priority: 5000 });
    await c.enqueue(spec({ maxIter: 1 }), { jobId: 'urgent', priority: 1 });
    await c.enqueue(spec({ maxIter: 1 }), { jobId: 'plain-2', priority: 0 });
    const w = await worker(c, { concurrency: 1, iterationMs: 5 });
    for (const id of ['plain-1', 'low', 'urgent', 'plain-2']) await c.wait(id);
    expect(w.started.map((s) => s.id)).toEqual(['urgent', 'plain-1', 'plain-2', 'low']);
  });

  it("a schedule's runs get the default priority too, so a priority-1 job overtakes them", async () => {
    const c = client();
    await c.schedule('nightly', { every: HOUR }, spec({ maxIter: 1 }));
    const [run] = await (await c.queue()).getJobs(['delayed', 'waiting', 'prioritized']);
    expect(run.opts.priority).toBe(1000);
  });
});
