/**
 * A whole job while the worker's Redis answers keep getting lost: a TCP proxy between the worker (a child process) and
 * a real redis-server drops the next reply and cuts that connection, again and again from enqueue to completion, so
 * whatever the worker sends at that moment — a job fetch, a lock renewal, an iteration entry, progress, a checkpoint
 * save, the claim, the commit point, the completion — has run in Redis while the worker is told nothing, and ioredis
 * sends it again after reconnecting. The job must complete once, with the bytes of an uninterrupted run, one result
 * in the model history, no staging left, and an iteration stream without a gap or a repeat that no resume explains.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { ensureDistBuilt, expectCompletedOnce, iterationStreamDefects, spawnWorker, startStack, type ChildWorker, type Stack } from '../integration/pipeline-fixture.js';

const ENGINE = { chunkRows: 8192, threads: 1 };
const SPEC = { k: 32, maxIter: 40, tol: 0, seed: 6 };
// a job fetched in Redis whose answer the worker never heard is held by a lock nobody renews, and comes back like a
// killed worker's: short locks keep that to a second or two
const FAST_LOCKS = { KMFLEET_LOCK_DURATION_MS: '1500', KMFLEET_STALLED_INTERVAL_MS: '300' };

describe('a job while the worker\'s Redis replies keep getting lost', () => {
  let stack: Stack;
  let proxy: TcpProxy;
  let dir: string;
  let path: string;
  let worker: ChildWorker | undefined;

  beforeAll(async () => {
    ensureDistBuilt();
    stack = await startStack();
    proxy = await startTcpProxy(stack.redis.port);
    dir = mkdtempSync(join(tmpdir(), 'kmfleet-lost-replies-'));
    path = (await generateDataset(join(dir, 'n.npy'), { kind: 'normal', rows: 60_000, dims: 32, seed: 9 })).path;
    await stack.s3.put('data', 'n.npy', readFileSync(path));
  });
  afterAll(async () => {
    if (worker) {
      worker.kill('SIGKILL');
      await worker.exited;
    }
    await proxy?.stop();
    await stack?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('completes once with the uninterrupted bytes; the iteration stream has no gap or stray repeat', async () => {
    const env = stack.env({ KMFLEET_CHUNK_ROWS: String(ENGINE.chunkRows), KMFLEET_THREADS: String(ENGINE.threads), KMFLEET_LOG_LEVEL: 'info', ...FAST_LOCKS });
    env.REDIS_URL = `redis://127.0.0.1:${proxy.port}`;
    worker = spawnWorker(env);
    const jobId = 'lost-1';
    await stack.client.enqueue({ dataset: { uri: 's3://data/n.npy' }, ...SPEC, backend: 'cpu', output: 's3://out/lr', name: 'lr-model' }, { jobId });

    // lose one reply every ~40 ms until the job is done, each on a connection past its handshake
    let done = false;
    let lost = 0;
    const storm = (async () => {
      while (!done) {
        const next = proxy.loseNextReply({ openForMs: 250 });
        const happened = await Promise.race([next.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 2000))]);
        if (happened) lost++;
        await new Promise((r) => setTimeout(r, 40));
      }
    })();
    const result = await stack.client.wait(jobId, { timeoutMs: 50_000 }).finally(() => (done = true));
    await storm;
    expect(lost, worker.output().slice(-3000)).toBeGreaterThanOrEqual(3);
    expect(result.iterations).toBe(SPEC.maxIter);

    await expectCompletedOnce(stack, { jobId, output: 's3://out/lr', model: 'lr-model', path, spec: SPEC, engine: ENGINE });
    const stream = await iterationStreamDefects(stack, jobId, SPEC.maxIter, result.resumedFrom?.iteration);
    expect({ missing: stream.missing, strayRepeats: stream.strayRepeats }, `raw stream ${stream.raw.join(',')}, ${lost} replies lost`)
      .toEqual({ missing: [], strayRepeats: [] });
  });
});
