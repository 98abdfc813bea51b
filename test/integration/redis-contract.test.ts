/**
 * docs/redis-contract.md holds: a producer that knows only what that page says — BullMQ with the literal queue name,
 * prefix and job name, a spec checked against api/job-spec.schema.json, the documented job options, the cancel flag
 * and message — gets its job run by a real worker (real redis-server, s3rver, engine), reads back the documented
 * progress and result, and cancels a job that waits. No kmfleet producer code is used to enqueue.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Ajv2020 from 'ajv/dist/2020.js';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { ROOT, startStack, type Stack } from './pipeline-fixture.js';

const doc = readFileSync(join(ROOT, 'docs', 'redis-contract.md'), 'utf8');
const OPTIONS = JSON.parse(/```json\n([\s\S]*?)```/.exec(doc)![1]);
const CLEAR_STATE = /```lua\n([\s\S]*?)```/.exec(doc)![1];

describe('docs/redis-contract.md, followed by a foreign producer', () => {
  let stack: Stack;
  let redis: Redis;
  let queue: Queue;
  let dir: string;
  beforeAll(async () => {
    stack = await startStack();
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-contract-'));
    const data = await generateDataset(join(dir, 'x.npy'), { kind: 'blobs', rows: 5000, dims: 4, centers: 3, seed: 1 });
    await stack.s3.put('data', 'x.npy', readFileSync(data.path));
    redis = new Redis(stack.redis.url, { maxRetriesPerRequest: null });
    expect(doc).toMatch(/\| BullMQ queue name \| `jobs`/);
    expect(doc).toMatch(/\| BullMQ key prefix \| `\{kmfleet\}`/);
    expect(doc).toMatch(/\| job name \| `kmeans` \|/);
    queue = new Queue('jobs', { connection: redis, prefix: '{kmfleet}' });
  });
  afterAll(async () => {
    await queue?.close();
    redis?.disconnect();
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('a job added with the documented layout runs, and reports the documented progress and result', async () => {
    // the spec with its defaults filled in, as the page asks, valid by the checked-in JSON Schema
    const spec = {
      version: 1, dataset: { uri: 's3://data/x.npy', format: 'npy' }, k: 3, metric: 'l2', init: 'kmeans++', maxIter: 50,
      tol: 0.0001, tolReassign: 0, seed: 0, precision: 'auto', output: 's3://out/foreign', checkpointEvery: 1, backend: 'cpu', name: 'foreign',
    };
    const validate = new Ajv2020.default({ strict: true }).compile(JSON.parse(readFileSync(join(ROOT, 'api', 'job-spec.schema.json'), 'utf8')));
    expect(validate(spec), JSON.stringify(validate.errors)).toBe(true);
    expect(OPTIONS).toMatchObject({ attempts: 3 });

    const keys = ['{kmfleet}:jobs:foreign-1', ...['iterations', 'checkpoint', 'cancel'].map((k) => `{kmfleet}:job:jobs:foreign-1:${k}`)];
    await redis.set(keys[3], 'stale cancel from an earlier job with this id');
    expect(await redis.eval(CLEAR_STATE, 4, ...keys)).toBe(1);
    await queue.add('kmeans', { spec, enqueuedAt: Date.now() }, { ...OPTIONS, jobId: 'foreign-1' });
    await stack.startWorker();

    // the SDK (what the CLI, dashboard and API use) sees the job as its own
    const result = await stack.client.wait('foreign-1', { timeoutMs: 60_000 });
    const job = (await queue.getJob('foreign-1'))!;
    expect(job.returnvalue).toEqual(result);
    expect(result).toMatchObject({ jobId: 'foreign-1', k: 3, dataset: { rows: 5000, dims: 4, format: 'npy' } });
    expect(result.outputs.centroids).toBe('s3://out/foreign/foreign-1/centroids.npy');
    expect(Object.keys(job.progress as object).sort()).toEqual(
      ['phase', 'iteration', 'maxIter', 'inertia', 'reassigned', 'reassignedFraction', 'shift', 'settledFraction', 'etaMs', 'updatedAt', 'rowsPerPass'].sort(),
    );
    expect(stack.s3.keys('out', 'foreign/foreign-1/')).toContain('foreign/foreign-1/summary.json');
    const stream = await redis.xrange('{kmfleet}:job:jobs:foreign-1:iterations', '-', '+');
    expect(stream.length).toBeGreaterThanOrEqual(result.iterations);
    expect(stream[0][1].filter((_, i) => i % 2 === 0)).toEqual(['iteration', 'inertia', 'reassigned', 'shift', 'ms', 'claim']);
    expect(await redis.zrevrange('{kmfleet}:model:foreign:history', 0, -1)).toEqual(['foreign-1']);
    expect(JSON.parse((await redis.hget('{kmfleet}:model:foreign:results', 'foreign-1'))!)).toEqual(result);
    expect(await redis.get('{kmfleet}:model:foreign:latest')).toBe('foreign-1');
  });

  it('the documented cancel stops a job: flag, message, remove', async () => {
    await queue.add('kmeans', { spec: { dataset: { uri: 's3://data/x.npy' }, k: 3, output: 's3://out/foreign' } }, { ...OPTIONS, jobId: 'foreign-2', delay: 600_000 });
    await redis.set('{kmfleet}:job:jobs:foreign-2:cancel', 'cancelled', 'PX', 86_400_000);
    await redis.publish('{kmfleet}:cancel:jobs', 'foreign-2');
    expect(await queue.remove('foreign-2')).toBe(1);
    // the SDK reads this as a cancelled job (the flag stays for a day), not as an unknown one
    await expect(stack.client.wait('foreign-2', { timeoutMs: 5000 })).rejects.toThrow(/was cancelled/);
  });
});
