/**
 * A worker that lost its job during the final upload never deletes or overwrites the outputs its successor committed,
 * on real Redis, s3rver and worker processes:
 *   - worker A (a child process) is frozen (SIGSTOP) with its assignments PUT in flight (held at an S3 proxy); its
 *     lock expires, worker B resumes the job and commits; then A's PUT lands and A wakes;
 *   - the same, with A cut off from Redis only (a TCP proxy partitions it) while its S3 side keeps working;
 *   - a job that completed is run again (its completion lost) and the re-run fails after it wrote outputs.
 * After everything settles, centroids.npy and assignments.npy exist, their sha256 equal summary.json's, and no staging
 * object is left.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { createS3 } from '../../worker/s3/client.js';
import { accessDenied, hold, startS3FaultProxy, type S3FaultProxy } from '../helpers/s3-fault-proxy.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { ensureDistBuilt, spawnWorker, startStack, until, type ChildWorker, type Stack } from '../integration/pipeline-fixture.js';

const SPEC = { k: 24, maxIter: 8, tol: 0, seed: 5 };
const ENGINE = { KMFLEET_CHUNK_ROWS: '8192', KMFLEET_THREADS: '1' };
// short locks so that a frozen worker's job comes back in about a second
const FAST_LOCKS = { KMFLEET_LOCK_DURATION_MS: '1500', KMFLEET_STALLED_INTERVAL_MS: '300' };

const sha = (b: Uint8Array) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

describe('a stale worker and the committed outputs', () => {
  let stack: Stack;
  let dir: string;
  let proxy: S3FaultProxy;
  /** the assignments PUT to hold next (by job id), and how to let it go */
  const held = new Map<string, { release: () => void; released: Promise<void>; seen: boolean }>();
  let denyAssignmentsOf: string | undefined;

  beforeAll(async () => {
    ensureDistBuilt();
    stack = await startStack({ clientJobOptions: { attempts: 3 } });
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-stale-'));
    const path = (await generateDataset(join(dir, 'n.npy'), { kind: 'normal', rows: 100_000, dims: 16, seed: 3 })).path;
    await stack.s3.put('data', 'n.npy', readFileSync(path));
    proxy = await startS3FaultProxy(stack.s3, {
      fault: (r) => {
        if (!(r.operation === 'PutObject' && r.key.endsWith('/assignments.npy'))) return undefined;
        const jobId = [...held.keys()].find((id) => r.key.startsWith(`runs/${id}/`));
        if (jobId && !held.get(jobId)!.seen) {
          held.get(jobId)!.seen = true;
          return hold(held.get(jobId)!.released);
        }
        if (denyAssignmentsOf && r.key.startsWith(`runs/${denyAssignmentsOf}/`)) return accessDenied();
        return undefined;
      },
    });
  });
  afterAll(async () => {
    for (const h of held.values()) h.release();
    await stack?.stop();
    await proxy?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const holdAssignments = (jobId: string) => {
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    held.set(jobId, { release, released, seen: false });
    return held.get(jobId)!;
  };
  const enqueue = (jobId: string) =>
    stack.client.enqueue({ dataset: { uri: 's3://data/n.npy' }, ...SPEC, backend: 'cpu', output: 's3://out/runs', name: `m-${jobId}` }, { jobId });

  /** the committed outputs are there and match summary.json; nothing staged is left */
  const expectCommitted = async (jobId: string) => {
    const summary = JSON.parse((await stack.s3.get('out', `runs/${jobId}/summary.json`)).toString('utf8'));
    const centroids = await stack.s3.get('out', `runs/${jobId}/centroids.npy`);
    const assignments = await stack.s3.get('out', `runs/${jobId}/assignments.npy`);
    expect(summary.checksums).toEqual({ 'assignments.npy': sha(assignments), 'centroids.npy': sha(centroids) });
    expect(stack.s3.keys('out', `runs/${jobId}/`).filter((k) => !k.includes('/_checkpoints/'))).toEqual([
      `runs/${jobId}/assignments.npy`,
      `runs/${jobId}/centroids.npy`,
      `runs/${jobId}/summary.json`,
    ]);
  };

  const staleScenario = async (jobId: string, cut: (a: ChildWorker) => void, restore: (a: ChildWorker) => void, redisPort?: number) => {
    const h = holdAssignments(jobId);
    const env = stack.env({ ...ENGINE, ...FAST_LOCKS, KMFLEET_LOG_LEVEL: 'info', KMFLEET_S3_ENDPOINT: proxy.endpoint });
    if (redisPort !== undefined) env.REDIS_URL = `redis://127.0.0.1:${redisPort}`;
    const a = spawnWorker(env);
    try {
      await enqueue(jobId);
      await until(async () => h.seen, 30_000, "A's assignments PUT");
      cut(a);
      const b = await stack.startWorker({ ...ENGINE, ...FAST_LOCKS });
      const result = await stack.client.wait(jobId, { timeoutMs: 60_000 });
      expect(result.resumedFrom?.generation).toBe(1); // B resumed A's checkpoint: A had claimed first
      await expectCommitted(jobId);
      // A's PUT lands now, and A goes on
      h.release();
      restore(a);
      await until(async () => /lost the job|lost the job's lock/.test(a.output()), 30_000, 'A to notice it lost the job');
      await until(async () => stack.s3.keys('out', `runs/${jobId}/_attempts/`).length === 0, 10_000, "A's staging to be gone");
      await expectCommitted(jobId);
      await b.shutdown();
    } finally {
      a.kill('SIGKILL');
      await a.exited;
    }
  };

  it('A frozen (SIGSTOP) in its final upload: B commits, A wakes, its late PUT lands; the outputs stand', async () => {
    await staleScenario('stale-freeze', (a) => a.kill('SIGSTOP'), (a) => a.kill('SIGCONT'));
  });

  it('A cut off from Redis only, its S3 side working: B commits, A comes back; the outputs stand', async () => {
    const redisProxy: TcpProxy = await startTcpProxy(stack.redis.port);
    try {
      await staleScenario('stale-partition', () => redisProxy.partition(), () => redisProxy.heal(), redisProxy.port);
    } finally {
      await redisProxy.stop();
    }
  });

  it('a re-run after a lost completion that fails midway leaves the committed outputs as they were', async () => {
    const jobId = 'rerun-1';
    const first = await stack.startWorker({ ...ENGINE });
    await enqueue(jobId);
    await stack.client.wait(jobId, { timeoutMs: 60_000 });
    await first.shutdown();
    await expectCommitted(jobId);
    const before = await stack.s3.get('out', `runs/${jobId}/summary.json`);

    // Redis lost the completion: the job is waiting again, and its re-run is refused the assignments upload
    const queue = new Queue(stack.client.keys.queueName, { connection: { port: stack.redis.port, host: '127.0.0.1' }, prefix: stack.client.keys.bullPrefix });
    try {
      await (await queue.getJob(jobId))!.retry('completed');
    } finally {
      await queue.close();
    }
    denyAssignmentsOf = jobId;
    const s3 = createS3(proxy.settings);
    const rerun = await stack.startWorker({ ...ENGINE }, { s3 });
    try {
      await expect(stack.client.wait(jobId, { timeoutMs: 60_000 })).rejects.toThrow(/access denied/i);
      expect(proxy.requests.some((r) => r.fault === 'AccessDenied' && r.key.startsWith(`runs/${jobId}/`))).toBe(true);
      // the re-run had written centroids.npy before it failed
      expect(proxy.requests.some((r) => r.operation === 'PutObject' && r.key.startsWith(`runs/${jobId}/`) && r.key.endsWith('/centroids.npy'))).toBe(true);
      await expectCommitted(jobId);
      expect((await stack.s3.get('out', `runs/${jobId}/summary.json`)).equals(before)).toBe(true);
    } finally {
      denyAssignmentsOf = undefined;
      await rerun.shutdown();
      s3.destroy();
    }
  });
});
