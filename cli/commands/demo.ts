/**
 * `kmfleet demo`: the whole path of a job on one machine, in one command.
 *   1. services   REDIS_URL / KMFLEET_S3_ENDPOINT if set, else a local redis-server and s3rver on random ports
 *   2. data       ~1M × 32 float32 blobs (seeded), uploaded to s3://<bucket>/datasets/
 *   3. job        enqueued through the SDK (KmfleetClient), run by a worker in this process, live progress
 *   4. results    where the outputs are, the summary, and a report SVG (convergence + cluster sizes) next to the
 *                 outputs in S3 and in --out locally
 */
import { open, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { KmfleetClient } from '../../producer/client.js';
import { connectionFromEnv, describeConnection } from '../../producer/connection.js';
import { generateDataset } from '../../core/index.js';
import { loadWorkerConfig } from '../../worker/config.js';
import { S3MultipartSink } from '../../worker/outputs/multipart-sink.js';
import { createS3 } from '../../worker/s3/client.js';
import { getObjectBuffer, putObjectBuffer } from '../../worker/s3/objects.js';
import { parseS3Uri } from '../../worker/s3/uri.js';
import { startWorker } from '../../worker/worker.js';
import { humanCount, ProgressLine } from '../progress.js';
import { startLocalRedis, startLocalS3, type LocalService } from './demo-stack.js';
import { renderReportSvg } from './demo-report.js';

interface DemoOptions {
  rows: number;
  dims: number;
  k: number;
  centers: number;
  maxIter: number;
  seed: number;
  bucket: string;
  out: string;
}

export async function action(opts: DemoOptions): Promise<void> {
  await demo(opts);
}

const say = (s: string) => process.stdout.write(s + '\n');

export async function demo(opts: DemoOptions): Promise<void> {
  const services: LocalService[] = [];
  const cleanups: (() => Promise<void>)[] = [];
  try {
    // ---- 1. services ----
    const env: NodeJS.ProcessEnv = { ...process.env };
    if (!env.REDIS_URL && !env.REDIS_CLUSTER_NODES) {
      const redis = await startLocalRedis();
      services.push(redis);
      env.REDIS_URL = redis.url;
      say(`redis   local redis-server at ${redis.url}`);
    } else say(`redis   ${describeConnection(connectionFromEnv(env))} (REDIS_URL${env.REDIS_CLUSTER_NODES ? ', REDIS_CLUSTER_NODES' : ''})`);
    if (!env.KMFLEET_S3_ENDPOINT && !env.AWS_ACCESS_KEY_ID && !env.AWS_PROFILE) {
      const s3 = await startLocalS3([opts.bucket]);
      services.push(s3);
      Object.assign(env, {
        KMFLEET_S3_ENDPOINT: s3.url,
        KMFLEET_S3_COMPAT: 's3rver',
        AWS_ACCESS_KEY_ID: 'S3RVER',
        AWS_SECRET_ACCESS_KEY: 'S3RVER',
        AWS_REGION: env.AWS_REGION ?? 'us-east-1',
      });
      say(`s3      local s3rver at ${s3.url}, bucket ${opts.bucket}`);
    } else say(`s3      ${env.KMFLEET_S3_ENDPOINT ?? 'AWS'} (bucket ${opts.bucket} must exist)`);
    env.KMFLEET_METRICS_PORT ??= '0';
    env.KMFLEET_LOG_LEVEL ??= 'warn';

    const config = loadWorkerConfig(env);
    const s3 = createS3(config.s3);
    cleanups.push(async () => s3.destroy());

    // ---- 2. data ----
    const progress = new ProgressLine({ plainEveryMs: 1000 });
    const local = join(tmpdir(), `kmfleet-demo-${process.pid}.npy`);
    cleanups.push(() => rm(local, { force: true }));
    const tg = performance.now();
    await generateDataset(local, {
      kind: 'blobs',
      rows: opts.rows,
      dims: opts.dims,
      centers: opts.centers,
      seed: opts.seed,
      onProgress: (done) => progress.update(`generating ${humanCount(done)} / ${humanCount(opts.rows)} rows`),
    });
    progress.done();
    const datasetKey = `datasets/blobs-${opts.rows}x${opts.dims}-s${opts.seed}.npy`;
    const sink = new S3MultipartSink(s3, { bucket: opts.bucket, key: datasetKey });
    const fh = await open(local, 'r');
    try {
      const buf = Buffer.allocUnsafe(8 * 1024 * 1024);
      for (;;) {
        const { bytesRead } = await fh.read(buf, 0, buf.length, null);
        if (bytesRead === 0) break;
        await sink.write(buf.subarray(0, bytesRead));
      }
      await sink.end();
    } catch (err) {
      await sink.abort();
      throw err;
    } finally {
      await fh.close();
    }
    const datasetUri = `s3://${opts.bucket}/${datasetKey}`;
    say(`data    ${humanCount(opts.rows)} × ${opts.dims} blobs (${opts.centers} centers) → ${datasetUri} (${((performance.now() - tg) / 1000).toFixed(1)} s)`);

    // ---- 3. job: SDK → queue → worker ----
    const worker = await startWorker(config, { s3 });
    cleanups.push(() => worker.shutdown('demo done'));
    const client = new KmfleetClient({ connection: connectionFromEnv(env) });
    cleanups.push(() => client.close());
    const jobId = `demo-${Date.now().toString(36)}`;
    const output = `s3://${opts.bucket}/runs`;
    await client.enqueue(
      { dataset: { uri: datasetUri }, k: opts.k, maxIter: opts.maxIter, seed: opts.seed, output, name: 'demo' },
      { jobId },
    );
    say(`job     ${jobId} enqueued: k=${opts.k}, maxIter=${opts.maxIter}; worker running here (concurrency ${worker.concurrency})`);
    const live = new ProgressLine();
    const result = await client.wait(jobId, {
      pollMs: 100,
      onProgress: (p, state) => {
        if (!p) return live.update(`${jobId}: ${state}`);
        const eta = p.etaMs !== null ? `  eta ${(p.etaMs / 1000).toFixed(1)} s` : '';
        const inertia = p.inertia !== null ? `  inertia ${p.inertia.toPrecision(6)}` : '';
        const moved = p.reassignedFraction !== null ? `  moved ${(100 * p.reassignedFraction).toFixed(2)}%` : '';
        live.update(`${p.phase.padEnd(12)} iter ${p.iteration}/${p.maxIter}${inertia}${moved}${eta}`);
      },
    });
    live.done();

    // ---- 4. results ----
    const summary = JSON.parse((await getObjectBuffer(s3, parseS3Uri(result.outputs.summary))).toString('utf8')) as {
      history: { inertia: number }[];
      clusterSizes: number[];
    };
    const svg = renderReportSvg({
      title: `kmfleet demo ${jobId}: ${humanCount(opts.rows)} × ${opts.dims}, k = ${opts.k}`,
      subtitle: `${result.iterations} iterations (${result.stopReason}), inertia ${result.inertia.toPrecision(6)}, ${result.backend}: ${result.device}, ${result.precision}, ${(result.timings.totalMs / 1000).toFixed(1)} s`,
      inertia: summary.history.map((h) => h.inertia),
      clusterSizes: summary.clusterSizes,
    });
    const reportUri = `${result.outputs.prefix}/report.svg`;
    await putObjectBuffer(s3, parseS3Uri(reportUri), Buffer.from(svg), { ContentType: 'image/svg+xml' });
    const outDir = resolve(opts.out);
    await mkdir(outDir, { recursive: true });
    await writeFile(join(outDir, 'report.svg'), svg);
    await writeFile(join(outDir, 'summary.json'), JSON.stringify(summary, null, 2) + '\n');
    const t = result.timings as Record<string, number>;
    say('');
    say(`outputs ${result.outputs.prefix}/`);
    for (const [name, sum] of Object.entries(result.checksums ?? {})) say(`          ${name.padEnd(16)} ${sum.slice(0, 23)}…`);
    say(`          report.svg`);
    say(`result  ${result.iterations} iterations, stop: ${result.stopReason}, inertia ${result.inertia.toPrecision(8)}, empty clusters re-seeded: ${result.emptyClustersReseeded}`);
    say(`engine  ${result.backend}: ${result.device}, precision ${result.precision}`);
    say(
      `time    total ${t.totalMs} ms = open ${t.openMs} + init ${t.initMs} + iterate ${t.iterateMs} (reads ${t.readMs}, checkpoints ${t.checkpointMs}) + assign ${t.assignMs} + upload ${t.uploadMs}`,
    );
    say(`report  ${join(outDir, 'report.svg')}  (and ${reportUri})`);
    say(`summary ${join(outDir, 'summary.json')}`);
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => {});
    for (const s of services.reverse()) await s.stop().catch(() => {});
  }
}
