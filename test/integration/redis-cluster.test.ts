/**
 * kmfleet on a REAL Redis Cluster (3 masters, password, test/helpers/redis-cluster.ts) with a real s3rver: the SDK, an
 * in-process worker, the cancel pub/sub, the noeviction check of every master, the CLI's client and the queue exporter,
 * all configured as a pod would be (REDIS_URL + REDIS_CLUSTER_NODES).
 *
 * The seed given to clients and workers is ONE node that does not serve the `{kmfleet}` slot: a client that is not a
 * cluster client would get MOVED for every key, so nothing here can pass on a single-node connection by luck.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withClient } from '../../cli/commands/connection.js';
import { KmfleetClient } from '../../producer/client.js';
import { connectionFromEnv } from '../../producer/connection.js';
import { JobCancelledError, RedisUnavailableError } from '../../producer/errors/index.js';
import { assertNoEviction, maxmemoryPolicies } from '../../producer/eviction-policy.js';
import { readIterations } from '../../producer/job-state.js';
import { keyspace } from '../../producer/keys.js';
import { createRedisClient, isCluster } from '../../producer/redis-factory.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { loadWorkerConfig } from '../../worker/config.js';
import { startQueueExporter } from '../../worker/metrics/queue-exporter.js';
import { RedisPolicyError, startWorker, type KmfleetWorker } from '../../worker/worker.js';
import { parsePrometheus } from '../helpers/prometheus.js';
import { startRedisCluster, type RedisClusterHandle } from '../helpers/redis-cluster.js';
import type { RedisServerHandle } from '../helpers/redis-server.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';
import { until } from './pipeline-fixture.js';

const PASSWORD = 'cl-s3cret:/@';
const keys = keyspace();

describe('Redis Cluster: SDK → worker → S3, cancel, noeviction on every master', () => {
  let cluster: RedisClusterHandle;
  let s3: S3ServerHandle;
  let dir: string;
  let slotOwner: RedisServerHandle;
  let seed: RedisServerHandle;
  /** REDIS_URL + REDIS_CLUSTER_NODES naming only `seed` */
  let seedEnv: Record<string, string>;
  let client: KmfleetClient;
  const workers: KmfleetWorker[] = [];

  const workerEnv = (extra: Record<string, string> = {}) => ({
    ...seedEnv,
    ...s3.env,
    KMFLEET_METRICS_PORT: '0',
    KMFLEET_LOG_LEVEL: process.env.KMFLEET_TEST_LOG_LEVEL ?? 'silent',
    KMFLEET_THREADS: '2',
    KMFLEET_CHUNK_ROWS: '4096',
    KMFLEET_CHECKPOINT_MIN_INTERVAL_MS: '0',
    ...extra,
  });
  const startClusterWorker = async (extra: Record<string, string> = {}) => {
    const config = loadWorkerConfig(workerEnv(extra));
    const w = await startWorker(config, { s3: s3.handle, logger: pino({ level: config.logLevel }) });
    workers.push(w);
    return w;
  };

  beforeAll(async () => {
    [cluster, s3] = await Promise.all([startRedisCluster({ password: PASSWORD }), startS3Server({ buckets: ['data', 'out'] })]);
    slotOwner = await cluster.nodeForKey(keys.models);
    seed = cluster.nodes.find((n) => n !== slotOwner)!;
    seedEnv = {
      REDIS_URL: `redis://:${encodeURIComponent(PASSWORD)}@127.0.0.1:${seed.port}`,
      REDIS_CLUSTER_NODES: `127.0.0.1:${seed.port}`,
    };
    client = new KmfleetClient({ connection: connectionFromEnv(seedEnv), jobOptions: { attempts: 1 } });
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-cluster-data-'));
    const blobs = await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows: 20_000, dims: 8, centers: 6, seed: 5, clusterStd: 2 });
    await s3.put('data', 'blobs.npy', readFileSync(blobs.path));
    const normal = await generateDataset(join(dir, 'normal.npy'), { kind: 'normal', rows: 100_000, dims: 32, seed: 3 });
    await s3.put('data', 'normal.npy', readFileSync(normal.path));
  });
  afterAll(async () => {
    await Promise.all(workers.map((w) => w.shutdown('test end').catch(() => undefined)));
    await client?.close();
    await Promise.all([cluster?.stop(), s3?.stop()]);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('the client and the worker connect as cluster clients through one seed, without printing the password', async () => {
    expect(slotOwner.port).not.toBe(seed.port);
    expect(client.where).toBe(`redis://127.0.0.1:${seed.port} (cluster)`);
    expect(client.where).not.toContain('s3cret');
    const conn = await client.connection();
    expect(isCluster(conn)).toBe(true);
    // discovery found every master from the one seed
    expect((conn as import('ioredis').Cluster).nodes('master').map((n) => n.options.port).sort()).toEqual(cluster.nodes.map((n) => n.port).sort());
  });

  it('a job enqueued through the SDK runs on a worker on the cluster: outputs in S3, iterations and model result in Redis', async () => {
    await startClusterWorker();
    await client.enqueue(
      { dataset: { uri: 's3://data/blobs.npy' }, k: 6, maxIter: 40, seed: 2, backend: 'cpu', output: 's3://out/runs/', name: 'cluster-model' },
      { jobId: 'cl-1' },
    );
    const result = await client.wait('cl-1', { timeoutMs: 60_000, pollMs: 20 });
    expect(result.iterations).toBeGreaterThan(1);
    expect(s3.keys('out', 'runs/cl-1/')).toEqual(['runs/cl-1/assignments.npy', 'runs/cl-1/centroids.npy', 'runs/cl-1/summary.json']);
    expect(decodeNpy(await s3.get('out', 'runs/cl-1/centroids.npy')).shape).toEqual([6, 8]);
    const summary = JSON.parse((await s3.get('out', 'runs/cl-1/summary.json')).toString('utf8'));
    expect(summary).toMatchObject({ jobId: 'cl-1', iterations: result.iterations });
    const iterations = await readIterations(await client.connection(), client.keys, 'cl-1');
    expect(iterations.map((r) => r.iteration)).toEqual(Array.from({ length: result.iterations }, (_, i) => i + 1));
    expect((await client.latest('cluster-model'))?.jobId).toBe('cl-1');
    expect((await client.history('cluster-model')).map((r) => r.jobId)).toEqual(['cl-1']);
    expect(await client.models()).toEqual(['cluster-model']);
  });

  it("all of kmfleet's keys for the job (BullMQ's and ours) are in the one {kmfleet} slot, on the node that serves it", async () => {
    const byNode = await cluster.keysByNode();
    const onOwner = byNode.get(slotOwner.port)!;
    for (const [port, list] of byNode) if (port !== slotOwner.port) expect(list, `keys on node ${port}`).toEqual([]);
    // the job's BullMQ hash, its iteration stream and checkpoint record, the model's history/results/latest, the model set
    for (const k of [
      `${keys.bullPrefix}:jobs:cl-1`, keys.iterations('cl-1'), keys.modelHistory('cluster-model'),
      keys.modelResults('cluster-model'), keys.modelLatest('cluster-model'), keys.models,
    ]) {
      expect(onOwner, k).toContain(k);
    }
    const owner = cluster.nodeClient(slotOwner);
    const slots = new Set(await Promise.all(onOwner.map(async (k) => Number(await owner.cluster('KEYSLOT', k)))));
    expect(slots.size).toBe(1);
    expect(onOwner.every((k) => k.startsWith(`${keys.bullPrefix}:`))).toBe(true);
  });

  it('a cancel from another client reaches the running worker through pub/sub on the cluster', async () => {
    for (const w of workers.splice(0)) await w.shutdown('next test');
    // the flag poll is off (10 min): only the cluster's pub/sub can stop the job before wait() times out
    await startClusterWorker({ KMFLEET_CANCEL_POLL_MS: '600000' });
    await client.enqueue(
      { dataset: { uri: 's3://data/normal.npy' }, k: 64, maxIter: 300, tol: 0, seed: 1, backend: 'cpu', output: 's3://out/runs' },
      { jobId: 'cl-cancel' },
    );
    await until(async () => ((await client.get('cl-cancel'))?.progress?.iteration ?? 0) >= 2, 30_000, 'iteration 2');
    // another process's client, seeded with every node
    const other = new KmfleetClient({ connection: cluster.connection });
    try {
      expect((await other.cancel('cl-cancel')).outcome).toBe('signalled');
    } finally {
      await other.close();
    }
    const err = await client.wait('cl-cancel', { timeoutMs: 15_000, pollMs: 20 }).catch((e) => e);
    expect(err).toBeInstanceOf(JobCancelledError);
    expect(await client.get('cl-cancel')).toMatchObject({ state: 'failed', failedReason: 'cancelled' });
    expect(s3.keys('out', 'runs/cl-cancel/')).toEqual([]);
  });

  it('the CLI client and the queue exporter read the queue on the cluster from REDIS_URL + REDIS_CLUSTER_NODES', async () => {
    for (const w of workers.splice(0)) await w.shutdown('next test');
    const saved = { REDIS_URL: process.env.REDIS_URL, REDIS_CLUSTER_NODES: process.env.REDIS_CLUSTER_NODES };
    Object.assign(process.env, seedEnv);
    let state: string | undefined;
    try {
      state = await withClient({}, async (c) => (await c.get('cl-1'))?.state);
    } finally {
      for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k]; else process.env[k] = v;
    }
    expect(state).toBe('completed');

    await client.enqueue({ dataset: { uri: 's3://data/blobs.npy' }, k: 3, output: 's3://out/runs' }, { jobId: 'cl-waiting' });
    const exporter = await startQueueExporter({ redis: connectionFromEnv(seedEnv), port: 0, host: '127.0.0.1' });
    try {
      const metrics = await until(async () => {
        const m = parsePrometheus(await (await fetch(`http://127.0.0.1:${exporter.server.port}/metrics`)).text());
        return m.get('kmfleet_queue_up{queue="jobs"}') === 1 ? m : undefined;
      }, 10_000, 'kmfleet_queue_up 1');
      expect(metrics.get('kmfleet_queue_jobs{queue="jobs",state="prioritized"}')).toBe(1); // every SDK job has a priority
    } finally {
      await exporter.close();
      expect((await client.cancel('cl-waiting')).outcome).toBe('removed');
    }
  });

  it('a worker refuses to start when ONE master (not the seed) has maxmemory-policy allkeys-lru', async () => {
    for (const w of workers.splice(0)) await w.shutdown('next test');
    const victim = cluster.nodes.find((n) => n !== seed)!;
    const admin = cluster.nodeClient(victim);
    await admin.config('SET', 'maxmemory-policy', 'allkeys-lru');
    try {
      const err = await startClusterWorker().catch((e) => e);
      expect(err).toBeInstanceOf(RedisPolicyError);
      expect(err.message).toContain(`allkeys-lru" on cluster node 127.0.0.1:${victim.port}`);
      const probe = createRedisClient(connectionFromEnv(seedEnv), 'producer');
      try {
        const policies = await maxmemoryPolicies(probe);
        expect(policies).toHaveLength(3);
        expect(policies.filter((p) => p.policy === 'allkeys-lru').map((p) => p.node)).toEqual([`127.0.0.1:${victim.port}`]);
        await expect(assertNoEviction(probe)).rejects.toThrow(/allkeys-lru on cluster node/);
      } finally {
        probe.disconnect();
      }
    } finally {
      await admin.config('SET', 'maxmemory-policy', 'noeviction');
    }
    // with every master back on noeviction the same configuration starts
    const w = await startClusterWorker();
    expect(w.draining).toBe(false);
  });

  it('a producer fails fast with one clear error when no cluster node answers (no password in it)', async () => {
    const dead = new KmfleetClient({
      connection: connectionFromEnv({ REDIS_URL: `redis://:${encodeURIComponent(PASSWORD)}@127.0.0.1:1`, REDIS_CLUSTER_NODES: '127.0.0.1:1,127.0.0.1:2' }),
      connectTimeoutMs: 1000,
    });
    // (a hang instead of an error would end this test at vitest's timeout)
    const err = await dead.get('x').catch((e) => e);
    await dead.close();
    expect(err).toBeInstanceOf(RedisUnavailableError);
    expect(err.message).toContain('redis://127.0.0.1:1,127.0.0.1:2 (cluster)');
    expect(err.message).toMatch(/REDIS_CLUSTER_NODES|ECONNREFUSED/);
    expect(err.message).not.toContain('s3cret');
  });
});
