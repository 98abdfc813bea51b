/**
 * Secrets never reach logs or CLI output. A full run on a password-protected redis-server, with the Redis password and
 * AWS_SECRET_ACCESS_KEY set to distinctive strings (s3rver checks no SigV4 signature, so any secret works there):
 *   - a worker child process at log level debug (pino JSON captured): one job that succeeds, one that fails;
 *   - the CLI (enqueue --wait, status --json, history, wait on the failed job) with the password in --redis-url or
 *     REDIS_URL;
 *   - Redis connection failures: the CLI and a worker pointed at a dead port, and the CLI with a wrong password;
 * then every captured line is searched for each secret, raw and URL-encoded: none may appear.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KmfleetClient } from '../../producer/client.js';
import { encodeNpy } from '../../core/formats/npy-encode.js';
import { freePort, startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';
import { ensureDistBuilt, ROOT, spawnWorker, until, type ChildWorker } from '../integration/pipeline-fixture.js';

const REDIS_PASSWORD = 'Rp4ss-9f3kQz!x@y/Zeta';
const WRONG_PASSWORD = 'WrongPw-7hT2mLq';
const AWS_SECRET = 'AwsSecret+Kx81bWq/Vnm3Hp0';
const SECRETS = [REDIS_PASSWORD, WRONG_PASSWORD, AWS_SECRET];
const forms = (s: string) => [s, encodeURIComponent(s), Buffer.from(s).toString('base64')];

interface Run { what: string; code: number | null; out: string }

function cli(args: string[], env: Record<string, string>, timeoutMs = 30_000): Promise<Run> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [join(ROOT, 'bin', 'kmfleet.js'), ...args], {
      cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    const t = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('exit', (code) => {
      clearTimeout(t);
      resolve({ what: `kmfleet ${args.join(' ')}`, code, out });
    });
  });
}

describe('secrets stay out of logs and CLI output', () => {
  let redis: RedisServerHandle;
  let s3: S3ServerHandle;
  let worker: ChildWorker | undefined;
  let deadWorker: ChildWorker | undefined;
  const runs: Run[] = [];

  beforeAll(async () => {
    ensureDistBuilt();
    [redis, s3] = await Promise.all([startRedisServer({ password: REDIS_PASSWORD }), startS3Server({ buckets: ['data', 'out'] })]);
    const a = new Float32Array(2000 * 4).map((_, i) => (i * 7919) % 101);
    await s3.put('data', 'ok.npy', encodeNpy(a, [2000, 4]));
  });
  afterAll(async () => {
    for (const w of [worker, deadWorker]) {
      if (w) {
        w.kill('SIGKILL');
        await w.exited;
      }
    }
    await Promise.all([s3?.stop(), redis?.stop()]);
  });

  it('a successful job, a failing job and Redis connection failures leak no secret', async () => {
    const env = { ...s3.env, AWS_SECRET_ACCESS_KEY: AWS_SECRET, KMFLEET_METRICS_PORT: '0', KMFLEET_THREADS: '1' };
    worker = spawnWorker({ ...env, REDIS_URL: redis.url, KMFLEET_LOG_LEVEL: 'debug' });
    await until(async () => /worker started/.test(worker!.output()), 20_000, 'the worker to start');

    const common = ['--redis-url', redis.url];
    runs.push(await cli(['enqueue', '--dataset', 's3://data/ok.npy', '--k', '3', '--max-iter', '5', '--backend', 'cpu',
      '--output', 's3://out/sec', '--name', 'sec-model', '--job-id', 'ok-1', '--wait', '--timeout', '30000', ...common], env));
    expect(runs.at(-1)!.code, runs.at(-1)!.out).toBe(0);
    runs.push(await cli(['enqueue', '--dataset', 's3://data/missing.npy', '--k', '3', '--backend', 'cpu',
      '--output', 's3://out/sec', '--job-id', 'bad-1', '--wait', '--timeout', '30000', '--json'], { ...env, REDIS_URL: redis.url }));
    expect(runs.at(-1)!.code, runs.at(-1)!.out).toBe(1);
    runs.push(await cli(['status', 'ok-1', '--json', ...common], env));
    runs.push(await cli(['status', 'bad-1', ...common], env));
    runs.push(await cli(['wait', 'bad-1', ...common], env));
    runs.push(await cli(['history', 'sec-model', '--json', ...common], env));

    // the SDK's own errors too (their messages end up in users' logs)
    const sdk = new KmfleetClient({ connection: redis.url });
    try {
      const failed = await sdk.wait('bad-1', { timeoutMs: 5000 }).catch((e: Error) => e);
      runs.push({ what: 'sdk wait bad-1', code: null, out: `${(failed as Error).message}\n${(failed as Error).stack}` });
    } finally {
      await sdk.close();
    }

    // Redis connection failures: a dead port (with the password in the URL) and a wrong password
    const dead = `redis://:${encodeURIComponent(REDIS_PASSWORD)}@127.0.0.1:${await freePort()}`;
    runs.push(await cli(['status', 'ok-1', '--redis-url', dead], env));
    runs.push(await cli(['enqueue', '--dataset', 's3://data/ok.npy', '--k', '3', '--output', 's3://out/sec', '--json'], { ...env, REDIS_URL: dead }));
    runs.push(await cli(['status', 'ok-1', '--redis-url', `redis://:${WRONG_PASSWORD}@127.0.0.1:${redis.port}`], env));
    runs.push(await cli(['status', 'ok-1', '--redis-url', `redis://default:${WRONG_PASSWORD}@127.0.0.1:${redis.port}`, '--json'], env));
    for (const r of runs.slice(-4)) expect(r.code, `${r.what}\n${r.out}`).not.toBe(0);
    const sdkDead = new KmfleetClient({ connection: dead, connectTimeoutMs: 500 });
    try {
      const e = (await sdkDead.get('x').catch((err: Error) => err)) as Error;
      runs.push({ what: 'sdk get on a dead port', code: null, out: `${e.message}\n${e.stack}\n${JSON.stringify(e)}` });
    } finally {
      await sdkDead.close().catch(() => {});
    }
    deadWorker = spawnWorker({ ...env, REDIS_URL: dead, KMFLEET_LOG_LEVEL: 'debug' });
    await new Promise((r) => setTimeout(r, 2500));
    deadWorker.kill('SIGTERM');
    await Promise.race([deadWorker.exited, new Promise((r) => setTimeout(r, 5000))]);
    deadWorker.kill('SIGKILL');
    runs.push({ what: 'worker on a dead Redis', code: null, out: deadWorker.output() });

    worker.kill('SIGTERM');
    await worker.exited;
    runs.push({ what: 'worker', code: null, out: worker.output() });

    // the captures are real: the worker logged both jobs, the failures said what failed
    expect(worker.output()).toMatch(/ok-1/);
    expect(worker.output()).toMatch(/bad-1/);
    expect(runs.find((r) => r.what.startsWith('kmfleet status ok-1 --redis-url redis://:WrongPw'))!.out).toMatch(/password|auth/i);

    const leaks: string[] = [];
    for (const r of runs) {
      r.out.split('\n').forEach((line, i) => {
        for (const s of SECRETS) {
          if (forms(s).some((f) => line.includes(f))) leaks.push(`${r.what} line ${i + 1}: ${line.slice(0, 300)}`);
        }
      });
    }
    expect(leaks, leaks.join('\n')).toEqual([]);
    if (process.env.KMFLEET_TEST_DEBUG) for (const r of runs) console.log(`--- ${r.what} (${r.code})\n${r.out.slice(0, 1500)}`);
  });
});
