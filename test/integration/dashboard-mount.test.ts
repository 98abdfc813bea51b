/**
 * The dashboard plugin mounted in an app of one's own (fastify), under a sub-path, against a real redis-server, a real
 * BullMQ worker in this process and real jobs enqueued through the SDK:
 *   - the mount: `/ops/kmfleet` redirects to `kmfleet/`, the page and its API answer under the prefix, the page names
 *     no absolute path; the app's own routes stay its own; the Host check applies under the prefix;
 *   - pagination: one state or all states, pages that do not overlap and cover every job, totals, bad parameters 400;
 *   - actions: retry (failed), remove (failed), promote (delayed) change the queue as the SDK says, only with the
 *     header naming the action, never on a read-only mount (403), and answer 'not-failed' / 'not-delayed' otherwise;
 *   - a real browser on the sub-path (skipped, with the reason, without /usr/bin/chromium): the counts, the pager, the
 *     state filter, and a failed job retried from its button.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UnrecoverableError, Worker, type Job } from 'bullmq';
import Fastify, { type FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dashboardPlugin, hostAllowance } from '../../dashboard/index.js';
import type { JobPage, QueueSnapshot } from '../../dashboard/snapshot.js';
import { KmfleetClient } from '../../producer/client.js';
import type { JobData } from '../../producer/job-data.js';
import { ensureDistBuilt } from '../helpers/dist-build.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';

const CHROMIUM = '/usr/bin/chromium';
const DELAYED = 57;
const FAILED = 3;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const spec = (name: string) => ({ dataset: { uri: `s3://bucket/${name}.npy` }, k: 4, output: 's3://bucket/out', name });

let redis: RedisServerHandle;
let client: KmfleetClient;
let worker: Worker;
let app: FastifyInstance;
let base: string;
/** jobs named 'flaky' fail while this is set; the worker completes every other job at once */
let failing = true;
const ran: string[] = [];

async function until<T>(what: string, fn: () => Promise<T | undefined | false>, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

async function call<T>(method: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: T; location: string | null }> {
  const r = await fetch(new URL(path, base), { method, headers, redirect: 'manual' });
  const text = await r.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* the page */
  }
  return { status: r.status, body: body as T, location: r.headers.get('location') };
}

beforeAll(async () => {
  redis = await startRedisServer();
  client = new KmfleetClient({ connection: redis.url, prefix: 'mnt', queue: 'jobs' });
  worker = new Worker('jobs', async (job: Job) => {
    const data = job.data as JobData;
    ran.push(job.id!);
    if (data.spec.name === 'flaky' && failing) throw new UnrecoverableError('flaky dataset');
    return { jobId: job.id };
  }, { connection: new Redis(redis.url, { maxRetriesPerRequest: null }), prefix: client.keys.bullPrefix, concurrency: 1 });

  for (let i = 0; i < FAILED; i++) {
    await client.enqueue(spec('flaky'), { jobId: `flaky-${i}` });
    await expect(client.wait(`flaky-${i}`)).rejects.toThrow(/flaky dataset/);
  }
  for (let i = 0; i < DELAYED; i++) await client.enqueue(spec('later'), { jobId: `later-${String(i).padStart(2, '0')}`, delayMs: 3_600_000 });

  app = Fastify();
  app.get('/ops/health', async () => ({ ok: true })); // the app's own route, beside the mount
  const hosts = hostAllowance({ host: '127.0.0.1' });
  await app.register(dashboardPlugin, { prefix: '/ops/kmfleet', client, actions: true, hosts });
  await app.register(dashboardPlugin, { prefix: '/ro', client, hosts });
  base = await app.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await app?.close();
  await worker?.close(true);
  await client?.close();
  await redis?.stop();
});

describe('dashboard plugin mounted under a sub-path', () => {
  it("is the package's `kmfleet/dashboard` entry (what docs/operations.md imports)", () => {
    ensureDistBuilt();
    const out = execFileSync(process.execPath, ['--input-type=module', '-e',
      "const m = await import('kmfleet/dashboard'); console.log(typeof m.dashboardPlugin, typeof m.hostAllowance, typeof m.startDashboard)"],
    { cwd: join(import.meta.dirname, '..', '..'), encoding: 'utf8' });
    expect(out.trim()).toBe('function function function');
  }, 120_000);

  it('redirects the bare prefix to its slash, serves the page with relative URLs only, leaves the app its routes', async () => {
    const bare = await call('GET', '/ops/kmfleet');
    expect(bare.status).toBe(308);
    expect(bare.location).toBe('kmfleet/'); // relative: right behind a proxy that adds a path of its own
    const page = await call<string>('GET', '/ops/kmfleet/');
    expect(page.status).toBe(200);
    expect(page.body).toContain('<html');
    expect(page.body).not.toMatch(/(src|href)="\//);
    expect((await call('GET', '/ops/kmfleet/app.js')).status).toBe(200);
    expect((await call('GET', '/ops/kmfleet/app.js')).body).not.toMatch(/['"`]\/api\//);
    expect((await call('GET', '/ops/kmfleet/api/queue')).status).toBe(200);
    expect((await call('GET', '/api/queue')).status).toBe(404); // nothing at the root
    expect((await call<{ ok: boolean }>('GET', '/ops/health')).body).toEqual({ ok: true });
    expect((await call('GET', '/ops/kmfleet/nothing')).status).toBe(404);
  });

  it('checks Host under the prefix (421 for a foreign name, page and actions alike)', async () => {
    // fetch() sends its own Host: node:http sends the forged one, as a rebinding page's browser would
    const { request } = await import('node:http');
    const send = (method: string, path: string, host: string, headers: Record<string, string> = {}) => new Promise<number>((resolve, reject) => {
      const u = new URL(base);
      const req = request({ host: u.hostname, port: u.port, method, path, setHost: false, headers: { Host: host, ...headers } },
        (res) => (res.resume(), resolve(res.statusCode ?? 0)));
      req.on('error', reject);
      req.end();
    });
    const port = new URL(base).port;
    expect(await send('GET', '/ops/kmfleet/api/jobs', `evil.example:${port}`)).toBe(421);
    expect(await send('GET', '/ops/kmfleet/', 'evil.example')).toBe(421);
    expect(await send('GET', '/ops/kmfleet/no/such', 'evil.example')).toBe(421);
    expect(await send('POST', '/ops/kmfleet/api/jobs/flaky-0/remove', `evil.example:${port}`, { 'X-Kmfleet': 'remove' })).toBe(421);
    expect(await send('GET', '/ops/kmfleet/api/jobs', `localhost:${port}`)).toBe(200);
    expect((await client.get('flaky-0'))?.state).toBe('failed');
  });

  it('pages through one state and through all states without overlap or gaps', async () => {
    const { body: q } = await call<QueueSnapshot>('GET', '/ops/kmfleet/api/queue');
    expect(q.counts).toMatchObject({ delayed: DELAYED, failed: FAILED, active: 0 });
    const ids = new Set<string>();
    for (let offset = 0; offset < DELAYED; offset += 25) {
      const { status, body } = await call<JobPage>('GET', `/ops/kmfleet/api/jobs?state=delayed&offset=${offset}&limit=25`);
      expect(status).toBe(200);
      expect(body).toMatchObject({ state: 'delayed', offset, limit: 25, total: DELAYED });
      expect(body.jobs).toHaveLength(Math.min(25, DELAYED - offset));
      for (const j of body.jobs) {
        expect(j.state).toBe('delayed');
        expect(ids.has(j.id), j.id).toBe(false);
        ids.add(j.id);
      }
    }
    expect(ids.size).toBe(DELAYED);
    const past = await call<JobPage>('GET', `/ops/kmfleet/api/jobs?state=delayed&offset=${DELAYED}&limit=25`);
    expect(past.body.jobs).toEqual([]);

    // all states, one after the other (delayed before failed), pages of 20 that straddle the border between them
    const all: string[] = [];
    for (let offset = 0; offset < DELAYED + FAILED; offset += 20) {
      const { body } = await call<JobPage>('GET', `/ops/kmfleet/api/jobs?offset=${offset}&limit=20`);
      expect(body.total).toBe(DELAYED + FAILED);
      expect(body.jobs.length).toBe(Math.min(20, DELAYED + FAILED - offset));
      all.push(...body.jobs.map((j) => j.id));
    }
    expect(new Set(all).size).toBe(DELAYED + FAILED);
    expect(all.slice(0, DELAYED)).toEqual([...ids]);
    expect(all.slice(DELAYED).sort()).toEqual(['flaky-0', 'flaky-1', 'flaky-2']);

    for (const bad of ['state=bogus', 'limit=0', 'limit=201', 'offset=-1', 'offset=x', 'state=failed&state=delayed']) {
      const r = await call<{ error: string }>('GET', `/ops/kmfleet/api/jobs?${bad}`);
      expect(r.status, bad).toBe(400);
      expect(r.body.error, bad).toMatch(/state|limit|offset/);
    }
  });

  it('retries, removes and promotes through the SDK, only with the header naming the action, never read-only', async () => {
    // the guard: no header, another action's header, the read-only mount
    expect((await call('POST', '/ops/kmfleet/api/jobs/flaky-0/retry')).status).toBe(403);
    expect((await call('POST', '/ops/kmfleet/api/jobs/flaky-0/retry', { 'X-Kmfleet': 'cancel' })).status).toBe(403);
    expect((await call('POST', '/ro/api/jobs/flaky-0/retry', { 'X-Kmfleet': 'retry' })).status).toBe(403);
    expect((await call<{ actions: string[] }>('GET', '/ro/api/config')).body.actions).toEqual([]);
    expect((await client.get('flaky-0'))?.state).toBe('failed');

    failing = false;
    const retried = await call<{ outcome: string }>('POST', '/ops/kmfleet/api/jobs/flaky-0/retry', { 'X-Kmfleet': 'retry' });
    expect(retried.status).toBe(200);
    expect(retried.body.outcome).toBe('retried');
    await until('flaky-0 to run again and complete', async () => (await client.get('flaky-0'))?.state === 'completed');
    expect(ran.filter((id) => id === 'flaky-0')).toHaveLength(2);
    expect((await call<{ outcome: string }>('POST', '/ops/kmfleet/api/jobs/flaky-0/retry', { 'X-Kmfleet': 'retry' })).body.outcome).toBe('not-failed');

    const removed = await call<{ outcome: string }>('POST', '/ops/kmfleet/api/jobs/flaky-1/remove', { 'X-Kmfleet': 'remove' });
    expect(removed.body.outcome).toBe('removed');
    expect(await client.get('flaky-1')).toBeNull();
    expect((await call<{ outcome: string }>('POST', '/ops/kmfleet/api/jobs/flaky-1/remove', { 'X-Kmfleet': 'remove' })).body.outcome).toBe('not-found');

    expect((await call<{ outcome: string }>('POST', '/ops/kmfleet/api/jobs/flaky-2/promote', { 'X-Kmfleet': 'promote' })).body.outcome).toBe('not-delayed');
    const promoted = await call<{ outcome: string }>('POST', '/ops/kmfleet/api/jobs/later-00/promote', { 'X-Kmfleet': 'promote' });
    expect(promoted.body.outcome).toBe('promoted');
    await until('later-00 to run now', async () => (await client.get('later-00'))?.state === 'completed');
    const { body: q } = await call<QueueSnapshot>('GET', '/ops/kmfleet/api/queue');
    expect(q.counts).toMatchObject({ delayed: DELAYED - 1, failed: 1, completed: 2 });
  });
});

const browserReason = existsSync(CHROMIUM) ? null : `${CHROMIUM} is missing (apt-get install -y chromium, or scripts/setup --tests as root)`;
if (browserReason) console.warn(`dashboard mount browser test skipped: ${browserReason}`);

describe.skipIf(browserReason !== null)('the mounted page in a real browser (Debian chromium)', () => {
  it('loads under the sub-path, pages, filters by state, and retries a failed job from its button', async () => {
    const { chromium } = await import('playwright-core');
    const profile = mkdtempSync(join(tmpdir(), 'kmfleet-chromium-'));
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
      page.on('response', (r) => r.status() >= 400 && errors.push(`${r.status()} ${r.url()}`));
      page.on('request', (r) => !r.url().startsWith(`${base}/ops/kmfleet/`) && errors.push(`outside the mount: ${r.url()}`));
      await page.goto(new URL('/ops/kmfleet/', base).href);

      const delayed = DELAYED - 1;
      const total = delayed + 3; // and flaky-2 failed, flaky-0 and later-00 completed
      await page.waitForFunction((n) => document.querySelector('#page-text')?.textContent === `1–25 of ${n}`, total);
      expect(await page.textContent('[data-state="delayed"] .n')).toBe(String(delayed));
      expect(await page.locator('#jobs tbody tr').count()).toBe(25);
      await page.click('#next');
      await page.waitForFunction((n) => document.querySelector('#page-text')?.textContent === `26–50 of ${n}`, total);
      await page.click('#prev');
      await page.waitForFunction((n) => document.querySelector('#page-text')?.textContent === `1–25 of ${n}`, total);

      // the failed count filters the list; its one job has a retry button that works
      await page.click('[data-state="failed"]');
      await page.waitForFunction(() => document.querySelector('#jobs-title')?.textContent === 'Jobs · failed');
      await page.waitForFunction(() => document.querySelector('#page-text')?.textContent === '1–1 of 1');
      await page.click('tr[data-job="flaky-2"]');
      await page.waitForFunction(() => document.querySelector('#detail h3')?.textContent === 'flaky-2' && document.querySelector('#retry'));
      expect(await page.textContent('#progress-text')).toBe('failed before it started · 1 attempt');
      page.once('dialog', (d) => void d.accept());
      await page.click('#retry');
      await until('flaky-2 retried and completed', async () => (await client.get('flaky-2'))?.state === 'completed');
      await page.waitForFunction(() => document.querySelector('#jobs-empty') && !(document.querySelector('#jobs-empty') as HTMLElement).hidden);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
      rmSync(profile, { recursive: true, force: true });
    }
  });
});
