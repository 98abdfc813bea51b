/**
 * Every spec field wrong in every way (types, ranges, enums, unknown fields, missing required, over-limit k / dims /
 * maxIter / k×dims centroid bytes), alone and many at once, through KmfleetClient.enqueue against a real redis-server:
 * each is ONE SpecValidationError whose issues name exactly the bad fields (and its message names each of them), and
 * nothing reaches Redis (queue counts 0, no key at all). Seeded combinations (KMFLEET_FUZZ_SEED replays a run).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { KmfleetClient } from '../../producer/client.js';
import { SpecValidationError } from '../../producer/errors/spec-validation-error.js';
import { keyspace } from '../../producer/keys.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';
import { Rng } from '../helpers/reference.js';

const SEED = Number(process.env.KMFLEET_FUZZ_SEED ?? (Date.now() % 2 ** 31));
const MISSING = Symbol('missing');

/** field path → values that must each be refused (MISSING = the field left out; only for required fields) */
const BAD: Record<string, unknown[]> = {
  version: [2, 0, '1', 1.5, null, true],
  'dataset.uri': [MISSING, '', 'http://data/x.npy', 's3://', 's3://bucket', 'data/x.npy', 5, null, ['s3://a/b']],
  'dataset.format': ['csv', 'NPY', 'f64', 5, null, {}],
  'dataset.dims': [0, -1, 1.5, '8', 4097, 1e9, NaN, Infinity, null],
  k: [MISSING, 0, -1, 1.5, '8', 1_000_001, NaN, Infinity, -Infinity, null, [8], {}],
  metric: ['L2', 'euclidean', '', 5, null],
  init: ['kmeans', 'k-means++', 's3://b/centroids.txt', 'http://b/c.npy', 5, null],
  maxIter: [0, -5, 10_001, 1.5, '10', Infinity, null],
  tol: [-1, -1e-9, 'x', NaN, Infinity, null],
  tolReassign: [-0.1, 1.1, 'x', NaN, null],
  seed: [-1, 2 ** 32, 1.5, 'x', NaN, null],
  precision: ['fp64', 'FP32', 5, null],
  output: [MISSING, '', 'http://out/p', 'out/p', 5, null],
  name: ['', 'a b', 'x'.repeat(129), 'é', 5, null],
  checkpointEvery: [-1, 1.5, 'x', null, Infinity],
  backend: ['gpu', 'CPU', 5, null],
};
const UNKNOWN = ['kk', 'maxIters', 'Metric', '__proto__x', 'constructor'];

const base = () => ({ dataset: { uri: 's3://data/x.npy' } as Record<string, unknown>, k: 8, output: 's3://out/p' } as Record<string, unknown>);

function setPath(spec: Record<string, unknown>, path: string, v: unknown): void {
  const [a, b] = path.split('.');
  const target = b === undefined ? spec : (spec[a] as Record<string, unknown>);
  const key = b ?? a;
  if (v === MISSING) delete target[key];
  else target[key] = v;
}

describe(`spec fuzzing through KmfleetClient.enqueue (seed ${SEED})`, () => {
  let redis: RedisServerHandle;
  let client: KmfleetClient;
  let raw: Redis;
  let queue: Queue;

  beforeAll(async () => {
    redis = await startRedisServer();
    client = new KmfleetClient({ connection: redis.url });
    raw = new Redis(redis.url);
    queue = new Queue('jobs', { connection: redis.connection, prefix: keyspace({}).bullPrefix });
  });
  afterAll(async () => {
    await queue?.close().catch(() => {});
    raw?.disconnect();
    await client?.close().catch(() => {});
    await redis?.stop();
  });

  /** enqueue must throw one SpecValidationError naming exactly `expected` (paths) */
  async function expectRefused(spec: unknown, expected: string[], what: string): Promise<void> {
    let err: unknown;
    try {
      await client.enqueue(spec);
    } catch (e) {
      err = e;
    }
    const ctx = `seed ${SEED}: ${what}: ${JSON.stringify(spec, (_k, v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v))}`;
    expect(err, ctx).toBeInstanceOf(SpecValidationError);
    const e = err as SpecValidationError;
    const paths = [...new Set(e.issues.map((i) => i.path))].sort();
    expect(paths, `${ctx}\n${e.message}`).toEqual([...new Set(expected)].sort());
    for (const p of expected) expect(e.message, ctx).toContain(p || '(spec)');
  }

  it('each bad value of each field alone: one error naming that field', async () => {
    let n = 0;
    for (const [path, values] of Object.entries(BAD)) {
      for (const v of values) {
        const spec = base();
        setPath(spec, path, v);
        await expectRefused(spec, [path], `${path} = ${String(v)}`);
        n++;
      }
    }
    for (const key of UNKNOWN) {
      await expectRefused({ ...base(), [key]: 1 }, [key], `unknown ${key}`);
      await expectRefused({ ...base(), dataset: { uri: 's3://data/x.npy', [key]: 1 } }, [`dataset.${key}`], `unknown dataset.${key}`);
      n += 2;
    }
    expect(n).toBeGreaterThan(100);
  });

  it('not an object at all, or cross-field problems', async () => {
    for (const v of [null, 5, 'spec', [], true, undefined]) await expectRefused(v, [''], `spec = ${String(v)}`);
    for (const ds of [null, 's3://data/x.npy', 5, []]) await expectRefused({ ...base(), dataset: ds }, ['dataset'], `dataset = ${String(ds)}`);
    await expectRefused({ ...base(), dataset: { uri: 's3://data/x.f32', format: 'f32' } }, ['dataset.dims'], 'raw format without dims');
    await expectRefused({ ...base(), init: 'previous' }, ['name'], 'previous without name');
    // k and dims each under their limit, k × dims × 4 over 8 GiB
    await expectRefused({ ...base(), k: 1_000_000, dataset: { uri: 's3://data/x.npy', dims: 4096 } }, ['k'], 'centroid bytes over the limit');
    await expectRefused({}, ['dataset', 'k', 'output'], 'empty spec');
  });

  it(`random combinations of bad fields (seeded): every one named in one error`, async () => {
    const rng = new Rng(SEED); // the reference's mulberry32: a seed replays the same cases
    const r = () => rng.uniform();
    const fields = Object.keys(BAD);
    for (let c = 0; c < 400; c++) {
      const spec = base();
      const expected: string[] = [];
      for (const f of fields) {
        if (r() < 0.3) {
          const vals = BAD[f];
          setPath(spec, f, vals[Math.floor(r() * vals.length)]);
          expected.push(f);
        }
      }
      if (r() < 0.3) {
        const key = UNKNOWN[Math.floor(r() * UNKNOWN.length)];
        spec[key] = 0;
        expected.push(key);
      }
      if (expected.length === 0) continue;
      await expectRefused(spec, expected, `combination #${c}`);
    }
  });

  it('nothing reached Redis: queue counts 0 and no key at all', async () => {
    const counts = await queue.getJobCounts();
    expect(Object.values(counts).every((v) => v === 0), JSON.stringify(counts)).toBe(true);
    const keys = (await raw.keys('*')).filter((k) => !k.endsWith(':meta')); // BullMQ's Queue may write its meta key
    expect(keys).toEqual([]);
    // and the client is still usable: a good spec goes in
    const ok = await client.enqueue(base(), { jobId: 'good-1' });
    expect(ok.created).toBe(true);
    expect((await queue.getJobCounts()).prioritized).toBe(1); // every SDK job has a priority
  });
});
