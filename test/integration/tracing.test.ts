/**
 * Tracing end to end on real servers: the SDK as bin/kmfleet.js starts it (cli/tracing.ts, here with an in-memory
 * exporter in place of OTLP), then a job enqueued through the SDK and run by a worker. The producer's enqueue, BullMQ's
 * spans and the worker's phases are one trace; the S3 and Redis client spans sit under them; the job's log lines carry
 * that trace's id. Then the real `kmfleet` process: spans only when the OTEL_* environment asks for them.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { SpanKind } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTracing, stopTracing } from '../../cli/tracing.js';
import { ensureDistBuilt } from '../helpers/dist-build.js';

const exporter = new InMemorySpanExporter();
// before anything imports ioredis or the AWS SDK: the instrumentations patch them as they load
await startTracing({ spanProcessor: new SimpleSpanProcessor(exporter) });
// vitest imports ioredis by its file path, which the ESM loader hook does not take for 'ioredis' (`kmfleet` imports it
// by name: the last test checks that); a require by name lets the require hook patch the class everyone shares
createRequire(import.meta.url)('ioredis');
const { startStack } = await import('./pipeline-fixture.js');
const { createLogger } = await import('../../worker/logger.js');
const { generateDataset } = await import('../../core/dataset/synthetic.js');
const { tracingRegistered } = await import('../../producer/telemetry.js');

const AWS_SCOPE = '@opentelemetry/instrumentation-aws-sdk';
const REDIS_SCOPE = '@opentelemetry/instrumentation-ioredis';

describe('tracing: producer → worker → S3 and Redis in one trace', () => {
  let stack: Awaited<ReturnType<typeof startStack>>;
  let dir: string;
  const lines: Record<string, unknown>[] = [];
  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-tracing-'));
    const data = await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows: 4000, dims: 8, centers: 4, seed: 3 });
    await stack.s3.put('data', 'blobs.npy', readFileSync(data.path));
  });
  afterAll(async () => {
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
    await stopTracing();
  });

  it('enqueue, BullMQ, the job phases, S3 and Redis spans share one trace; log lines carry its id', async () => {
    const stream = new Writable({
      write(chunk, _enc, cb) {
        for (const l of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(l));
        cb();
      },
    });
    const worker = await stack.startWorker({}, { logger: createLogger({ level: 'info', destination: stream }) });
    await stack.client.enqueue(
      { dataset: { uri: 's3://data/blobs.npy' }, k: 4, maxIter: 6, tol: 0, seed: 1, backend: 'cpu', output: 's3://out/traced/', checkpointEvery: 2 },
      { jobId: 'traced-1' },
    );
    const result = await stack.client.wait('traced-1', { timeoutMs: 60_000, pollMs: 20 });
    await worker.shutdown();

    const spans = exporter.getFinishedSpans();
    const named = (name: string) => spans.filter((s) => s.name === name);
    const one = (name: string): ReadableSpan => {
      const found = named(name);
      expect(found, name).toHaveLength(1);
      return found[0];
    };
    const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

    const enqueue = one('kmfleet.enqueue');
    const traceId = enqueue.spanContext().traceId;
    const inTrace = spans.filter((s) => s.spanContext().traceId === traceId);
    const byId = new Map(inTrace.map((s) => [s.spanContext().spanId, s]));
    const ancestors = (s: ReadableSpan): string[] => {
      const names: string[] = [];
      for (let p = byId.get(parentOf(s) ?? ''); p; p = byId.get(parentOf(p) ?? '')) names.push(p.name);
      return names;
    };

    // producer: the enqueue is the root; BullMQ's add is under it and carries the context into the job
    expect(parentOf(enqueue)).toBeUndefined();
    const add = inTrace.find((s) => s.kind === SpanKind.PRODUCER);
    expect(add, 'BullMQ producer span').toBeDefined();
    expect(parentOf(add!)).toBe(enqueue.spanContext().spanId);
    // worker: BullMQ's process span continues the producer's trace, the job and its phases under it
    const process = inTrace.find((s) => s.kind === SpanKind.CONSUMER);
    expect(process, 'BullMQ consumer span in the producer\'s trace').toBeDefined();
    expect(parentOf(process!)).toBe(add!.spanContext().spanId);
    const job = one('kmfleet.job');
    expect(job.spanContext().traceId).toBe(traceId);
    expect(parentOf(job)).toBe(process!.spanContext().spanId);
    expect(job.attributes).toMatchObject({ 'kmfleet.job.id': 'traced-1', 'kmfleet.job.attempt': 1, 'kmfleet.job.outcome': 'completed' });
    for (const phase of ['open', 'init', 'iterate', 'outputs', 'record']) {
      expect(parentOf(one(`kmfleet.${phase}`)), phase).toBe(job.spanContext().spanId);
    }
    expect(parentOf(one('kmfleet.commit'))).toBe(one('kmfleet.outputs').spanContext().spanId);
    const iterate = one('kmfleet.iterate').spanContext().spanId;
    const iterations = named('kmfleet.iteration');
    expect(iterations.map((s) => s.attributes['kmfleet.iteration'])).toEqual(Array.from({ length: result.iterations }, (_, i) => i + 1));
    for (const s of iterations) expect(parentOf(s)).toBe(iterate);
    const checkpoints = named('kmfleet.checkpoint');
    expect(checkpoints.length).toBeGreaterThanOrEqual(1);
    for (const s of checkpoints) expect(parentOf(s)).toBe(iterate);
    // every span of ours is in that one trace
    for (const s of spans.filter((x) => x.name.startsWith('kmfleet.'))) expect(s.spanContext().traceId, s.name).toBe(traceId);

    // S3 client spans under the phases that made the requests
    const s3 = inTrace.filter((s) => s.instrumentationScope.name === AWS_SCOPE);
    const s3Under = (op: string, ancestor: string) => s3.some((s) => s.name === `S3.${op}` && ancestors(s).includes(ancestor));
    expect(s3Under('GetObject', 'kmfleet.open'), 'dataset read under open').toBe(true);
    expect(s3Under('PutObject', 'kmfleet.checkpoint'), 'checkpoint upload').toBe(true);
    expect(s3Under('CopyObject', 'kmfleet.commit'), 'outputs copied into place').toBe(true);
    expect(s3Under('PutObject', 'kmfleet.commit'), 'summary.json').toBe(true);
    // Redis client spans: the producer's and the worker's, each under a span of the trace
    const redis = inTrace.filter((s) => s.instrumentationScope.name === REDIS_SCOPE);
    expect(redis.some((s) => ancestors(s)[0] === 'kmfleet.enqueue'), 'producer Redis commands').toBe(true);
    expect(redis.some((s) => ancestors(s).includes('kmfleet.checkpoint')), 'checkpoint record').toBe(true);
    expect(redis.some((s) => ancestors(s)[0] === 'kmfleet.iterate'), 'iteration writes').toBe(true);
    expect(redis.some((s) => ancestors(s).includes('kmfleet.commit')), 'commit point').toBe(true);
    // a worker's idle polling makes no Redis spans: each one has a parent
    for (const s of spans.filter((x) => x.instrumentationScope.name === REDIS_SCOPE)) expect(parentOf(s), s.name).toBeDefined();

    // log lines written inside the job's spans carry the trace id and the span they were written in
    const jobLines = lines.filter((l) => l.jobId === 'traced-1');
    expect(jobLines.map((l) => l.msg)).toEqual(expect.arrayContaining(['job started', 'dataset opened', 'job completed']));
    for (const l of jobLines) expect(l.trace_id, String(l.msg)).toBe(traceId);
    const opened = jobLines.find((l) => l.msg === 'dataset opened')!;
    expect(opened.span_id).toBe(one('kmfleet.open').spanContext().spanId);
    expect(jobLines.find((l) => l.msg === 'job completed')!.span_id).toBe(one('kmfleet.record').spanContext().spanId);
    expect(lines.find((l) => l.msg === 'worker started')).not.toHaveProperty('trace_id');
  });

  it('stopTracing leaves no tracer registered', async () => {
    expect(tracingRegistered()).toBe(true);
    await stopTracing();
    expect(tracingRegistered()).toBe(false);
  });

  describe('the kmfleet process', () => {
    beforeAll(() => ensureDistBuilt(), 120_000);

    const enqueue = (jobId: string, env: Record<string, string>) =>
      kmfleet(['enqueue', '--dataset', 's3://data/blobs.npy', '--k', '4', '--output', 's3://out/cli/', '--job-id', jobId], { REDIS_URL: stack.redis.url, ...env });
    const storedOpts = async (jobId: string) => {
      const redis = await stack.client.connection();
      return JSON.parse((await redis.hget((await stack.client.queue()).toKey(jobId), 'opts')) ?? '{}') as { tm?: string };
    };

    it('with OTEL_TRACES_EXPORTER=console: the enqueue, BullMQ\'s add and the Redis commands (by name alone) in one trace, carried by the job', async () => {
      const r = await enqueue('cli-traced', { OTEL_TRACES_EXPORTER: 'console' });
      expect(r.code, r.stderr).toBe(0);
      const spans = consoleSpans(r.stdout);
      const root = spans.find((x) => x.name === 'kmfleet.enqueue');
      expect(root, r.stdout).toBeDefined();
      expect(root!.parent).toBeUndefined();
      const add = spans.find((x) => x.name === 'add jobs.kmeans');
      expect(add?.parent).toBe(root!.id);
      const redis = spans.filter((x) => x.scope === REDIS_SCOPE);
      expect(redis.map((x) => x.name)).toEqual(expect.arrayContaining(['eval', 'hgetall']));
      for (const x of [add!, ...redis]) expect(x.traceId).toBe(root!.traceId);
      for (const x of redis) expect(x.text, x.name).toBe(x.name);
      // the job carries the trace context to whichever worker takes it
      expect((await storedOpts('cli-traced')).tm).toContain(`00-${root!.traceId}-`);
    });

    it('without OTEL_* variables: no span, no trace context in the job; an unsupported protocol is refused in one line', async () => {
      const off = await enqueue('cli-untraced', {});
      expect(off).toMatchObject({ code: 0, stdout: 'enqueued job cli-untraced\n' });
      expect(await storedOpts('cli-untraced')).not.toHaveProperty('tm');
      const grpc = await enqueue('cli-grpc', { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' });
      expect(grpc.code).toBe(2);
      expect(grpc.stderr).toMatch(/^kmfleet: error: OTEL_EXPORTER_OTLP_PROTOCOL=grpc: kmfleet exports OTLP over HTTP with protobuf only .*\n$/);
    });
  });
});

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'kmfleet.js');

/** `node bin/kmfleet.js …` with only the given OTEL_* variables. */
function kmfleet(args: string[], env: Record<string, string>): Promise<{ code: number; stdout: string; stderr: string }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('OTEL_')));
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env: { ...base, ...env }, timeout: 30_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** The spans ConsoleSpanExporter printed (util.inspect blocks from a `{` line to a `}` line). */
function consoleSpans(stdout: string) {
  return [...stdout.matchAll(/^\{\n([\s\S]*?)^\}$/gm)].map(([, b]) => ({
    name: /^ {2}name: '([^']*)'/m.exec(b)?.[1],
    traceId: /^ {2}traceId: '([0-9a-f]+)'/m.exec(b)?.[1],
    id: /^ {2}id: '([0-9a-f]+)'/m.exec(b)?.[1],
    parent: /^ {2}parentSpanContext: \{[^}]*?spanId: '([0-9a-f]+)'/m.exec(b)?.[1],
    scope: /^ {2}instrumentationScope: \{\s*name: '([^']*)'/m.exec(b)?.[1],
    text: /'db\.query\.text': '([^']*)'/.exec(b)?.[1],
  }));
}
