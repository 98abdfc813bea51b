/**
 * `kmfleet dashboard` against a real redis-server and a real BullMQ worker in this process that runs a job
 * slowly, writing progress and iteration records with the producer helpers (as the real worker does):
 *   1. the JSON API: counts by state, jobs, schedules, one job's progress and iterations, model history;
 *   2. a real browser (Debian's /usr/bin/chromium through playwright-core): the page shows the running job's
 *      progress, its convergence curve (log scale: point heights follow log10 of the inertia; linear on a click) has
 *      one point per iteration written, follows new iterations live, says that a failed job failed (and where)
 *      instead of its last phase, and shows a hostile failure reason as text. Skipped, with the reason printed, when
 *      chromium is missing.
 * Pagination, the sub-path mount and the job actions: dashboard-mount.test.ts.
 * Set KMFLEET_DASHBOARD_SCREENSHOT=docs/dashboard.png to refresh the README's screenshot.
 */
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { UnrecoverableError, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KmfleetClient } from '../../producer/client.js';
import { startDashboard, type DashboardServer } from '../../dashboard/server.js';
import type { JobPage, QueueSnapshot } from '../../dashboard/snapshot.js';
import type { JobData } from '../../producer/job-data.js';
import { appendIteration, type IterationRecord } from '../../producer/job-state.js';
import { keyspace } from '../../producer/keys.js';
import { makeProgress } from '../../producer/progress.js';
import { recordResult, type JobResult } from '../../producer/results.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';

const CHROMIUM = '/usr/bin/chromium';
const EVIL = '<img src=x onerror="window.__pwned=1">bad dataset & "quotes"';
const MAX_ITER = 20;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const spec = (name: string) => ({ dataset: { uri: `s3://bucket/${name}.npy` }, k: 8, maxIter: MAX_ITER, output: 's3://bucket/out', name });
const inertiaAt = (i: number) => 1000 * Math.exp(-i / 3) + 50;

let redis: RedisServerHandle;
let conn: Redis;
let client: KmfleetClient;
let worker: Worker;
let dash: DashboardServer;
const keys = keyspace({ prefix: 'dash', queue: 'jobs' });
/** The slow job writes iterations up to `target`, then waits; `release` lets it finish. */
let target = 5;
let release = false;
let written = 0;

async function until<T>(what: string, fn: () => Promise<T | undefined | false>, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

async function getJson<T>(path: string): Promise<{ status: number; body: T }> {
  const r = await fetch(new URL(path, dash.url));
  return { status: r.status, body: (await r.json()) as T };
}

async function processor(job: Job): Promise<JobResult> {
  const data = job.data as JobData;
  if (data.spec.name === 'broken') {
    // what the real worker reports before it opens the dataset: the page must not show this as if it still ran
    await job.updateProgress(makeProgress({ phase: 'opening', iteration: 0, maxIter: MAX_ITER, rows: 0 }));
    throw new UnrecoverableError(EVIL);
  }
  const startedAt = Date.now();
  let last: IterationRecord | undefined;
  for (let i = 1; i <= MAX_ITER; i++) {
    while (i > target && !release) await sleep(20);
    if (release && i > target) break;
    last = { iteration: i, inertia: inertiaAt(i), reassigned: 100 - i, shift: 1 / i, ms: 30 };
    await appendIteration(conn, keys, job.id!, last);
    await job.updateProgress(makeProgress({ phase: 'iterating', iteration: i, maxIter: MAX_ITER, rows: 1000, last, msPerIteration: 30 }));
    written = i;
    await sleep(30);
  }
  const result = {
    jobId: job.id!, name: data.spec.name, spec: data.spec, specHash: data.specHash,
    dataset: { uri: data.spec.dataset.uri, etag: 'e', format: 'npy', rows: 1000, dims: 4 }, k: data.spec.k,
    iterations: written, converged: true, stopReason: 'tol', inertia: last!.inertia, emptyClustersReseeded: 0,
    backend: 'cpu', device: 'test', precision: 'fp32',
    outputs: { centroids: 's3://bucket/out/c.npy', assignments: 's3://bucket/out/a.npy', summary: 's3://bucket/out/s.json' },
    timings: { totalMs: Date.now() - startedAt }, startedAt, finishedAt: Date.now(),
  } as unknown as JobResult;
  await recordResult(conn, keys, data.spec.name!, result);
  return result;
}

beforeAll(async () => {
  redis = await startRedisServer();
  conn = new Redis(redis.url, { maxRetriesPerRequest: null });
  client = new KmfleetClient({ connection: redis.url, prefix: 'dash', queue: 'jobs' });
  worker = new Worker('jobs', processor, { connection: new Redis(redis.url, { maxRetriesPerRequest: null }), prefix: keys.bullPrefix, concurrency: 1 });

  // failed (hostile reason), then active (the slow job), then one of each waiting kind and a schedule
  await client.enqueue(spec('broken'), { jobId: 'broken-1' });
  await expect(client.wait('broken-1')).rejects.toThrow(/bad dataset/);
  await client.enqueue(spec('emb-v2'), { jobId: 'run-1' });
  await until('5 iterations of run-1', async () => written === 5);
  await client.enqueue(spec('emb-v2'), { jobId: 'next-1' });
  await client.enqueue(spec('emb-v2'), { jobId: 'urgent-1', priority: 3 });
  await client.enqueue(spec('emb-v2'), { jobId: 'later-1', delayMs: 3_600_000 });
  await client.schedule('nightly', { cron: '0 3 * * *' }, spec('nightly'));
  dash = await startDashboard({ client, port: 0, actions: true });
});

afterAll(async () => {
  release = true;
  await dash?.close();
  await worker?.close(true);
  await client?.close();
  conn?.disconnect();
  await redis?.stop();
});

describe('dashboard JSON API', () => {
  it('counts jobs by state and lists them with progress and failure reasons', async () => {
    const { status, body } = await getJson<QueueSnapshot>('/api/queue');
    expect(status).toBe(200);
    // delayed: later-1 and the schedule's next run; every SDK job has a priority (BullMQ's prioritized set)
    expect(body.counts).toEqual({ waiting: 0, prioritized: 2, delayed: 2, active: 1, completed: 0, failed: 1 });
    const { body: page } = await getJson<JobPage>('/api/jobs');
    expect(page).toMatchObject({ state: 'all', offset: 0, total: 6 });
    const byId = new Map(page.jobs.map((j) => [j.id, j]));
    expect(page.jobs[0].id).toBe('run-1'); // active jobs first
    expect(byId.get('run-1')).toMatchObject({ state: 'active', name: 'emb-v2', k: 8, progress: { iteration: 5, maxIter: MAX_ITER, phase: 'iterating' } });
    expect(byId.get('broken-1')).toMatchObject({ state: 'failed', failedReason: EVIL });
    expect(byId.get('next-1')?.state).toBe('prioritized');
    expect(byId.get('urgent-1')?.state).toBe('prioritized');
    expect(byId.get('later-1')?.state).toBe('delayed');
    expect(body.schedules.map((s) => [s.name, s.cron])).toEqual([['nightly', '0 3 * * *']]);
    const { body: config } = await getJson<{ actions: string[] }>('/api/config');
    expect(config.actions).toEqual(['cancel', 'retry', 'remove', 'promote']);
  });

  it('returns one job, its iterations, 404 for an unknown job', async () => {
    const job = await getJson<{ state: string; progress: { iteration: number; inertia: number } }>('/api/jobs/run-1');
    expect(job.status).toBe(200);
    expect(job.body.state).toBe('active');
    expect(job.body.progress.iteration).toBe(5);
    expect(job.body.progress.inertia).toBe(inertiaAt(5));
    const its = await getJson<IterationRecord[]>('/api/jobs/run-1/iterations');
    expect(its.body.map((r) => r.iteration)).toEqual([1, 2, 3, 4, 5]);
    expect(its.body.map((r) => r.inertia)).toEqual([1, 2, 3, 4, 5].map(inertiaAt));
    expect((await getJson('/api/jobs/nope-1')).status).toBe(404);
    expect((await getJson('/api/jobs/a%20b/iterations')).status).toBe(404);
    // a scheduler's job id holds ':' (repeat:<name>:<millis>): the page sends it URL-encoded
    const { body: q } = await getJson<JobPage>('/api/jobs?state=delayed');
    const scheduled = q.jobs.find((j) => j.scheduler === 'nightly')!;
    expect(scheduled.id).toMatch(/^repeat:nightly:\d+$/);
    expect((await getJson<{ state: string }>(`/api/jobs/${encodeURIComponent(scheduled.id)}`)).body.state).toBe('delayed');
    expect((await getJson('/api/nothing')).status).toBe(404);
    expect((await fetch(new URL('/../package.json', dash.url))).status).toBe(404);
  });

  it("returns a model's result history, newest first", async () => {
    const { status, body } = await getJson<JobResult[]>('/api/models/emb-v2/history');
    expect(status).toBe(200);
    expect(body).toEqual([]); // run-1 has not finished yet: see 'when the job finishes' below
    expect((await getJson('/api/models/bad%20name/history')).status).toBe(404);
  });

  it('refuses a cancel without its header (no cross-site cancels)', async () => {
    const r = await fetch(new URL('/api/jobs/next-1/cancel', dash.url), { method: 'POST' });
    expect(r.status).toBe(403);
    expect((await client.get('next-1'))?.state).toBe('waiting');
  });
});

const browserReason = existsSync(CHROMIUM) ? null : `${CHROMIUM} is missing (apt-get install -y chromium, or scripts/setup --tests as root)`;
if (browserReason) console.warn(`dashboard browser test skipped: ${browserReason}`);

describe.skipIf(browserReason !== null)('dashboard in a real browser (Debian chromium)', () => {
  it('shows the running job, a curve with one point per iteration, live updates, and escapes user data', async () => {
    const { chromium } = await import('playwright-core');
    const profile = mkdtempSync(join(tmpdir(), 'kmfleet-chromium-'));
    const shots = mkdtempSync(join(tmpdir(), 'kmfleet-dashboard-'));
    // A fresh profile dir (playwright passes it as --user-data-dir); without the networking flags chromium keeps
    // trying Google's hosts, which this closed network refuses.
    const browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1440, height: 900 },
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync'],
    });
    try {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
      page.on('response', (r) => r.status() >= 400 && errors.push(`${r.status()} ${r.url()}`));
      await page.goto(new URL('/#job=run-1', dash.url).href);

      await page.waitForFunction(() => document.querySelector('#progress-text')?.textContent?.includes('iteration 5 / 20'));
      expect(await page.textContent('[data-state="active"] .n')).toBe('1');
      expect(await page.textContent('[data-state="failed"] .n')).toBe('1');
      const points = () => page.$eval('#detail polyline.curve', (e) => e.getAttribute('points')!.trim().split(/\s+/).length);
      expect(await points()).toBe(5);
      expect(await page.locator('#detail circle.pt').count()).toBe(5);
      expect(await page.textContent('#detail')).toContain('Convergence · 5 iterations');
      expect(await page.locator('tr[data-job="run-1"]').textContent()).toContain('5 / 20');

      // the curve is on a log scale: each point's height is linear in log10(inertia), not in the inertia
      const heights = async () => page.$$eval('#detail circle.pt', (cs) => cs.map((c) => Number(c.getAttribute('cy'))));
      const slopes = (cy: number[], f: (x: number) => number) =>
        cy.slice(1).map((y, i) => (y - cy[0]) / (f(inertiaAt(i + 2)) - f(inertiaAt(1))));
      const spread = (xs: number[]) => (Math.max(...xs) - Math.min(...xs)) / Math.abs(xs[0]);
      expect(await page.getAttribute('#detail svg.chart', 'data-scale')).toBe('log');
      expect(spread(slopes(await heights(), Math.log10))).toBeLessThan(0.02);
      expect(spread(slopes(await heights(), (x) => x))).toBeGreaterThan(0.1);
      await page.click('#scale');
      await page.waitForFunction(() => document.querySelector('#detail svg.chart')?.getAttribute('data-scale') === 'linear');
      expect(spread(slopes(await heights(), (x) => x))).toBeLessThan(0.02);
      await page.click('#scale');
      await page.waitForFunction(() => document.querySelector('#detail svg.chart')?.getAttribute('data-scale') === 'log');

      // live: the worker writes 3 more iterations; the page follows without a reload
      target = 8;
      await page.waitForFunction(() => document.querySelector('#detail polyline.curve')?.getAttribute('data-points') === '8');
      expect(await points()).toBe(8);
      await page.waitForFunction(() => document.querySelector('#progress-text')?.textContent?.includes('iteration 8 / 20'));
      await page.screenshot({ path: join(shots, 'dashboard.png') });
      expect(statSync(join(shots, 'dashboard.png')).size).toBeGreaterThan(10_000);
      if (process.env.KMFLEET_DASHBOARD_SCREENSHOT) await page.screenshot({ path: resolve(process.env.KMFLEET_DASHBOARD_SCREENSHOT) });

      // user data is text: the failure reason reads as written and no element was made from it
      await page.click('tr[data-job="broken-1"]');
      await page.waitForFunction(() => document.querySelector('#detail .failure') !== null);
      expect(await page.textContent('#detail .failure')).toBe(EVIL);
      // a failed job says it failed, and where: not its last phase as if it still ran
      expect(await page.textContent('#progress-text')).toBe('failed while opening · at iteration 0 / 20 · 1 attempt');
      expect(await page.locator('tr[data-job="broken-1"] td.stopped').textContent()).toBe('failed at 0 / 20');
      expect(await page.locator('#detail button#retry').count()).toBe(1); // a failed job can be retried, not cancelled
      expect(await page.locator('#detail button#cancel').count()).toBe(0);
      expect(await page.textContent('tr[data-job="broken-1"] .reason')).toBe(EVIL);
      expect(await page.locator('img').count()).toBe(0);
      expect(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned)).toBeUndefined();
      expect(errors).toEqual([]);

      // the cancel button (actions on) goes through the SDK: a waiting job is removed, and the page says so
      page.once('dialog', (d) => void d.accept());
      await page.click('tr[data-job="next-1"]');
      await page.waitForFunction(() => document.querySelector('#detail h3')?.textContent === 'next-1' && document.querySelector('#cancel'));
      await page.click('#cancel');
      await until('next-1 removed', async () => (await client.get('next-1')) === null);
      await page.waitForFunction(() => document.querySelector('[data-state="waiting"] .n')?.textContent === '0');
      await page.waitForFunction(() => document.querySelector('#detail')?.textContent?.includes('job next-1 not found'));
    } finally {
      await browser.close();
      rmSync(profile, { recursive: true, force: true });
      rmSync(shots, { recursive: true, force: true });
    }
  });
});

describe('dashboard JSON API when the job finishes', () => {
  it('counts it as completed with its result, and lists it in the model history', async () => {
    await worker.pause(true); // finish run-1, take no other job: the counts stay exact
    release = true;
    await client.wait('run-1', { timeoutMs: 15_000 });
    const { body } = await getJson<QueueSnapshot>('/api/queue');
    expect(body.counts.completed).toBe(1);
    expect(body.counts.active).toBe(0);
    expect(body.counts.prioritized).toBe(1);
    const { body: done } = await getJson<JobPage>('/api/jobs?state=completed');
    expect(done.total).toBe(1);
    const row = done.jobs.find((j) => j.id === 'run-1')!;
    expect(row).toMatchObject({ state: 'completed', result: { iterations: written, inertia: inertiaAt(written), converged: true } });
    const history = await getJson<JobResult[]>('/api/models/emb-v2/history');
    expect(history.body.map((r) => [r.jobId, r.iterations])).toEqual([['run-1', written]]);
    const its = await getJson<IterationRecord[]>('/api/jobs/run-1/iterations');
    expect(its.body).toHaveLength(written);
  });
});
