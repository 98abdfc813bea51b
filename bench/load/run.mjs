#!/usr/bin/env node
/**
 * Load: many small jobs at once on a few CPU workers, then the same while one worker is SIGKILLed and restarted every
 * few seconds. Checks exactly-once (no job lost, none completed twice) and prints throughput and latency.
 *
 *   npm run build:ts && node bench/load/run.mjs [--jobs 500] [--workers 4] [--rows 10000] [--dims 16] [--k 8]
 *                                              [--kill-every-ms 4000] [--phases steady,chaos]
 *
 * Set-up: one dataset (rows × dims float32 blobs) in s3rver (its own process), a local redis-server, `workers` worker
 * processes (`node bin/kmfleet.js worker`, KMFLEET_BACKEND=cpu, KMFLEET_THREADS=1, concurrency 1, short locks so a
 * killed worker's job comes back in ~2 s). Each phase enqueues `jobs` jobs at once (SDK, one model name per phase),
 * waits until all are finished, then counts:
 *   - BullMQ: completed / failed per job id;
 *   - the model's result history in Redis (one entry per job id, no other);
 *   - summary.json objects in s3rver's directory (one per job id);
 *   - 'job completed' log lines per job id across all worker processes (a job whose outcome was recorded twice shows
 *     up here even though BullMQ keeps one state).
 * Latency = BullMQ finishedOn − timestamp (enqueue to completion); throughput = jobs / (last finish − first enqueue).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const ROOT = new URL('../..', import.meta.url).pathname;
const dist = (p) => join(ROOT, 'dist', p);
const { values: a } = parseArgs({
  options: {
    jobs: { type: 'string', default: '500' },
    workers: { type: 'string', default: '4' },
    rows: { type: 'string', default: '10000' },
    dims: { type: 'string', default: '16' },
    k: { type: 'string', default: '8' },
    'kill-every-ms': { type: 'string', default: '4000' },
    phases: { type: 'string', default: 'steady,chaos' },
    'timeout-s': { type: 'string', default: '150' },
  },
});
const JOBS = Number(a.jobs), WORKERS = Number(a.workers), KILL_EVERY = Number(a['kill-every-ms']);

const { generateDataset } = await import(dist('core/dataset/synthetic.js'));
const { KmfleetClient } = await import(dist('producer/client.js'));
const { startLocalRedis } = await import(dist('cli/commands/demo-stack.js'));
const { createS3 } = await import(dist('worker/s3/client.js'));
const { putObjectBuffer } = await import(dist('worker/s3/objects.js'));

const children = new Set();
process.once('exit', () => { for (const c of children) c.kill('SIGKILL'); });
function child(args, env = {}) {
  const p = spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(p);
  let out = '';
  p.stdout.on('data', (d) => (out += d));
  p.stderr.on('data', (d) => (out += d));
  const exited = new Promise((r) => p.once('exit', (code, signal) => { children.delete(p); r({ code, signal }); }));
  return { p, out: () => out, exited };
}

async function startS3rverProcess(dir) {
  const code = `
    const S3rver = require('s3rver');
    const s = new S3rver({ port: 0, address: '127.0.0.1', silent: true, directory: ${JSON.stringify(dir)}, configureBuckets: [{ name: 'data' }, { name: 'out' }] });
    s.run().then((addr) => process.stdout.write('PORT ' + addr.port + '\\n'));
    process.on('SIGTERM', () => { s.httpServer && s.httpServer.closeAllConnections(); s.close().then(() => process.exit(0)); });`;
  const c = child(['-e', code]);
  for (let i = 0; i < 200 && !/PORT \d+/.test(c.out()); i++) await new Promise((r) => setTimeout(r, 25));
  const port = Number(/PORT (\d+)/.exec(c.out())?.[1]);
  if (!port) throw new Error(`s3rver did not start: ${c.out()}`);
  return { url: `http://127.0.0.1:${port}`, stop: async () => { c.p.kill('SIGTERM'); await c.exited; } };
}

function summaryKeys(root, prefix) {
  const out = [];
  const walk = (d) => {
    let names;
    try { names = readdirSync(d); } catch { return; }
    for (const n of names) {
      const p = join(d, n);
      if (statSync(p).isDirectory()) walk(p);
      else if (n === 'summary.json._S3rver_object') out.push(p.slice(root.length + 1));
    }
  };
  walk(join(root, prefix));
  return out;
}

const pct = (xs, p) => { const v = [...xs].sort((x, y) => x - y); return v[Math.min(v.length - 1, Math.ceil((p / 100) * v.length) - 1)]; };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-load-'));
const stops = [];
let exitCode = 0;
try {
  const path = join(dir, 'small.npy');
  await generateDataset(path, { kind: 'blobs', rows: Number(a.rows), dims: Number(a.dims), centers: Number(a.k), seed: 1, clusterStd: 2 });
  const redis = await startLocalRedis();
  stops.push(() => redis.stop());
  const s3dir = join(dir, 's3');
  const s3srv = await startS3rverProcess(s3dir);
  stops.push(() => s3srv.stop());
  const s3 = createS3({ endpoint: s3srv.url, compat: 's3rver', credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } });
  stops.push(async () => s3.destroy());
  await putObjectBuffer(s3, { bucket: 'data', key: 'small.npy' }, readFileSync(path));

  const env = {
    REDIS_URL: redis.url, KMFLEET_S3_ENDPOINT: s3srv.url, KMFLEET_S3_COMPAT: 's3rver', AWS_ACCESS_KEY_ID: 'S3RVER',
    AWS_SECRET_ACCESS_KEY: 'S3RVER', AWS_REGION: 'us-east-1', KMFLEET_METRICS_PORT: '0', KMFLEET_LOG_LEVEL: 'info',
    KMFLEET_BACKEND: 'cpu', KMFLEET_THREADS: '1', KMFLEET_CONCURRENCY: '1',
    KMFLEET_LOCK_DURATION_MS: '2000', KMFLEET_STALLED_INTERVAL_MS: '500', KMFLEET_MAX_STALLED_COUNT: '100',
  };
  const logs = []; // outputs of every worker process that ever ran
  const workers = [];
  const startWorker = (i) => {
    const w = child([join(ROOT, 'bin', 'kmfleet.js'), 'worker'], env);
    logs.push(w.out);
    workers[i] = w;
    return w;
  };
  for (let i = 0; i < WORKERS; i++) startWorker(i);
  // warm workers: throughput should not include their start-up
  for (let i = 0; i < 400 && !workers.every((w) => /worker started/.test(w.out())); i++) await sleep(50);
  stops.push(async () => {
    for (const w of workers) w.p.kill('SIGTERM');
    await Promise.race([Promise.all(workers.map((w) => w.exited)), sleep(10_000)]);
    for (const w of workers) w.p.kill('SIGKILL');
  });
  const client = new KmfleetClient({ connection: redis.url, jobOptions: { attempts: 3, backoff: { type: 'fixed', delay: 200 } } });
  stops.push(() => client.close());

  for (const phase of a.phases.split(',')) {
    const model = `load-${phase}`;
    const ids = Array.from({ length: JOBS }, (_, i) => `${phase}-${String(i).padStart(4, '0')}`);
    const t0 = Date.now();
    await Promise.all(ids.map((jobId) => client.enqueue(
      { dataset: { uri: 's3://data/small.npy' }, k: Number(a.k), maxIter: 50, seed: 7, backend: 'cpu', output: `s3://out/${phase}`, name: model },
      { jobId })));
    const enqueueMs = Date.now() - t0;
    let kills = 0;
    let chaos;
    if (phase === 'chaos') {
      let stop = false;
      chaos = (async () => {
        let victim = 0;
        while (!stop) {
          await sleep(KILL_EVERY);
          if (stop) break;
          const w = workers[victim];
          w.p.kill('SIGKILL');
          await w.exited;
          kills++;
          startWorker(victim);
          victim = (victim + 1) % WORKERS;
        }
      })();
      chaos.stop = () => { stop = true; };
    }
    // wait until every job is finished
    const deadline = Date.now() + Number(a['timeout-s']) * 1000;
    const conn = await client.connection();
    let done = 0;
    while (Date.now() < deadline) {
      const [c, f] = await Promise.all([conn.zcard(`${client.keys.bullPrefix}:jobs:completed`), conn.zcard(`${client.keys.bullPrefix}:jobs:failed`)]);
      done = c + f;
      if (done >= JOBS * (a.phases.split(',').indexOf(phase) + 1)) break;
      await sleep(250);
    }
    if (chaos) { chaos.stop(); await chaos; }
    const infos = await Promise.all(ids.map((id) => client.get(id)));
    const states = {};
    for (const i of infos) states[i?.state ?? 'missing'] = (states[i?.state ?? 'missing'] ?? 0) + 1;
    const completed = infos.filter((i) => i?.state === 'completed');
    const lat = completed.map((i) => i.timestamps.finishedAt - i.timestamps.createdAt);
    const lastFinish = Math.max(...completed.map((i) => i.timestamps.finishedAt));
    const firstEnq = Math.min(...infos.filter(Boolean).map((i) => i.timestamps.createdAt));
    const history = await client.history(model, { limit: JOBS * 2 });
    const historyIds = history.map((h) => h.jobId);
    const summaries = summaryKeys(s3dir, join('out', phase));
    const completions = new Map();
    for (const out of logs) {
      for (const line of out().split('\n')) {
        if (!line.includes('"job completed"')) continue;
        const id = /"jobId":"([^"]+)"/.exec(line)?.[1];
        if (id?.startsWith(`${phase}-`)) completions.set(id, (completions.get(id) ?? 0) + 1);
      }
    }
    const resumed = completed.filter((i) => i.result?.resumedFrom).length;
    const twice = [...completions].filter(([, n]) => n > 1).map(([id]) => id);
    const exactlyOnce = states.completed === JOBS && new Set(historyIds).size === JOBS && historyIds.length === JOBS &&
      summaries.length === JOBS && completions.size === JOBS && twice.length === 0;
    if (!exactlyOnce) exitCode = 1;
    const r = {
      phase, jobs: JOBS, workers: WORKERS, states, enqueueMs,
      throughputJobsPerS: +(completed.length / ((lastFinish - firstEnq) / 1000)).toFixed(2),
      latencyMs: { p50: pct(lat, 50), p95: pct(lat, 95), p99: pct(lat, 99), max: Math.max(...lat) },
      resultHistory: { entries: historyIds.length, unique: new Set(historyIds).size },
      summaryObjects: summaries.length,
      completedLogLines: { jobs: completions.size, jobsCompletedTwice: twice.length, examples: twice.slice(0, 5) },
      resumedFromCheckpoint: resumed, workerKills: kills, exactlyOnce,
    };
    console.log(JSON.stringify(r));
  }
} catch (err) {
  console.error(err);
  exitCode = 1;
} finally {
  for (const s of stops.reverse()) await s().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
}
process.exit(exitCode);
