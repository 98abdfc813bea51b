/**
 * `..` and its disguises in s3:// URIs must not escape KMFLEET_ALLOWED_BUCKETS. The SDK sends `s3://out/../other/x` as
 * the path `/out/../other/x`; s3rver (like many proxies) resolves the dot-segments and serves bucket `other`. On real
 * Redis + s3rver + a worker in a child process (KMFLEET_ALLOWED_BUCKETS=data,out), behind a recording proxy:
 *   - the producer refuses each hostile spec at enqueue (dataset.uri, init, output), naming the field;
 *   - the same specs put into Redis by hand (no producer check) fail once on the worker, unrecoverably, naming the
 *     field; so does a hand-made job whose id is `..` (its outputs would go to <output>/../);
 *   - bucket `other` is neither read nor written (no request the proxy saw resolves to it, its objects are unchanged)
 *     and no bucket is created; a sound job on the same worker still completes.
 */
import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { CreateBucketCommand } from '@aws-sdk/client-s3';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KmfleetClient } from '../../producer/client.js';
import { SpecValidationError } from '../../producer/errors/spec-validation-error.js';
import { JOB_NAME } from '../../producer/job-data.js';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import { startS3FaultProxy, type S3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { ensureDistBuilt, spawnWorker, startStack, type ChildWorker, type Stack } from '../integration/pipeline-fixture.js';

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

function rows(n: number, dims: number, seed: number): Float32Array {
  const a = new Float32Array(n * dims);
  let s = seed >>> 0;
  for (let i = 0; i < a.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = (s / 2 ** 32) * 10;
  }
  return a;
}

const K = 3;
const DIMS = 4;
const base = { dataset: { uri: 's3://data/d.npy' }, k: K, maxIter: 5, backend: 'cpu' as const, output: 's3://out/runs' };

// each reaches into bucket `other` through a bucket that is on the list
const HOSTILE: { id: string; field: string; spec: Record<string, unknown> }[] = [
  { id: 'esc-dataset', field: 'dataset.uri', spec: { ...base, dataset: { uri: 's3://data/../other/secret.npy' } } },
  { id: 'esc-dataset-dot', field: 'dataset.uri', spec: { ...base, dataset: { uri: 's3://data/./../other/secret.npy' } } },
  { id: 'esc-dataset-enc', field: 'dataset.uri', spec: { ...base, dataset: { uri: 's3://data/%2e%2e/other/secret.npy' } } },
  { id: 'esc-init', field: 'init', spec: { ...base, init: 's3://data/../other/c.npy' } },
  { id: 'esc-output', field: 'output', spec: { ...base, output: 's3://out/../other/stolen' } },
  { id: 'esc-output-root', field: 'output', spec: { ...base, output: 's3://out/..' } },
  { id: 'esc-output-empty', field: 'output', spec: { ...base, output: 's3://out//runs' } },
  { id: 'esc-output-backslash', field: 'output', spec: { ...base, output: 's3://out/..\\other' } },
];

describe('s3:// URIs cannot escape the allowed buckets', () => {
  let stack: Stack;
  let proxy: S3FaultProxy;
  let worker: ChildWorker | undefined;
  let client: KmfleetClient;
  let secret: Buffer;
  let centroids: Buffer;

  beforeAll(async () => {
    ensureDistBuilt();
    stack = await startStack();
    await stack.s3.handle.client.send(new CreateBucketCommand({ Bucket: 'other' }));
    secret = encodeNpy(rows(2000, DIMS, 7), [2000, DIMS]);
    centroids = encodeNpy(rows(K, DIMS, 9), [K, DIMS]);
    await stack.s3.put('other', 'secret.npy', secret);
    await stack.s3.put('other', 'c.npy', centroids);
    await stack.s3.put('data', 'd.npy', encodeNpy(rows(2000, DIMS, 5), [2000, DIMS]));
    proxy = await startS3FaultProxy(stack.s3);
    client = new KmfleetClient({ connection: stack.redis.url, limits: { allowedBuckets: ['data', 'out'] }, jobOptions: { attempts: 3, backoff: { type: 'fixed', delay: 200 } } });
  });
  afterAll(async () => {
    if (worker) {
      worker.kill('SIGKILL');
      await worker.exited;
    }
    await client?.close();
    await proxy?.stop();
    await stack?.stop();
  });

  it('the producer refuses every hostile spec at enqueue, naming the field', async () => {
    for (const { id, field, spec } of HOSTILE) {
      const err = await client.enqueue(spec as never, { jobId: id }).then(() => null, (e: unknown) => e);
      expect(err, id).toBeInstanceOf(SpecValidationError);
      expect((err as SpecValidationError).issues.map((i) => i.path), id).toEqual([field]);
      expect(await client.get(id), id).toBeNull();
    }
  });

  it('a worker refuses the same specs put into Redis by hand, and a job id "..": once, naming the field; `other` untouched', async () => {
    worker = spawnWorker(stack.env({ ...proxyEnv(proxy), KMFLEET_ALLOWED_BUCKETS: 'data,out', KMFLEET_THREADS: '1' }));
    const redis = new Redis(stack.redis.url, { maxRetriesPerRequest: null });
    const queue = new Queue(client.keys.queueName, { connection: redis, prefix: client.keys.bullPrefix });
    const opts = { attempts: 3, backoff: { type: 'fixed' as const, delay: 200 } };
    try {
      // bypassing the producer's check, as a hand-made or foreign job would
      for (const { id, spec } of HOSTILE) await queue.add(JOB_NAME, { spec, specHash: 'hand-made' }, { ...opts, jobId: id });
      await queue.add(JOB_NAME, { spec: { ...base, output: 's3://out' }, specHash: 'hand-made' }, { ...opts, jobId: '..' });
      await queue.add(JOB_NAME, { spec: base, specHash: 'hand-made' }, { ...opts, jobId: 'sound' });

      for (const { id, field } of HOSTILE) {
        await expect(client.wait(id, { timeoutMs: 60_000 }), id).rejects.toThrow();
        const info = await client.get(id);
        expect(info?.state, id).toBe('failed');
        expect(info?.attemptsMade, id).toBe(1); // no retry: the spec will not get better
        expect(info?.failedReason, id).toContain(`${field}: must be an s3://`);
      }
      await expect(client.wait('..', { timeoutMs: 60_000 })).rejects.toThrow();
      const dotdot = await client.get('..');
      expect(dotdot?.state).toBe('failed');
      expect(dotdot?.attemptsMade).toBe(1);
      expect(dotdot?.failedReason).toMatch(/job id "\.\." must not contain '\.' or '\.\.' path segments/);

      // the worker works: a sound job on it completes
      const result = await client.wait('sound', { timeoutMs: 60_000 });
      expect(result.iterations).toBeGreaterThan(0);
    } finally {
      await queue.close();
      redis.disconnect();
    }

    // nothing the worker sent resolves to bucket `other` (the proxy parses paths with WHATWG URL, which resolves
    // dot-segments and %2e as s3rver does) or to any bucket but data and out
    const buckets = new Set(proxy.requests.map((r) => r.bucket));
    expect(proxy.requests.length).toBeGreaterThan(0);
    expect([...buckets].sort()).toEqual(['data', 'out']);
    // `other` holds what it held, byte for byte; s3rver has no new bucket; out holds only the sound job's outputs
    expect(stack.s3.keys('other')).toEqual(['c.npy', 'secret.npy']);
    expect(sha(await stack.s3.get('other', 'secret.npy'))).toBe(sha(secret));
    expect(sha(await stack.s3.get('other', 'c.npy'))).toBe(sha(centroids));
    expect(readdirSync(stack.s3.dir).sort()).toEqual(['data', 'other', 'out']);
    expect(stack.s3.keys('out').every((k) => k.startsWith('runs/sound/'))).toBe(true);
  });
});

function proxyEnv(proxy: S3FaultProxy): Record<string, string> {
  return { KMFLEET_S3_ENDPOINT: proxy.endpoint };
}
