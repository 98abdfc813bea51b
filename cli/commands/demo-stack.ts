/**
 * The local services of `kmfleet demo` when none are configured: a redis-server (must be installed: scripts/setup
 * installs it) and an s3rver (a dev dependency) on random loopback ports, in a temporary directory removed on stop.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

export interface LocalService {
  /** REDIS_URL or the S3 endpoint */
  url: string;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

export async function startLocalRedis(): Promise<LocalService> {
  const dir = mkdtempSync(join(tmpdir(), 'kmfleet-demo-redis-'));
  const port = await freePort();
  const child: ChildProcess = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--maxmemory-policy', 'noeviction'],
    { stdio: 'ignore' },
  );
  const failed = new Promise<never>((_, reject) => {
    child.once('error', (err) =>
      reject(
        new Error(
          (err as NodeJS.ErrnoException).code === 'ENOENT'
            ? 'redis-server is not installed: run scripts/setup (as root it installs it), or set REDIS_URL'
            : `cannot start redis-server: ${err.message}`,
        ),
      ),
    );
    child.once('exit', (code) => reject(new Error(`redis-server exited at start-up (code ${code})`)));
  });
  failed.catch(() => {});
  const url = `redis://127.0.0.1:${port}`;
  const ready = (async () => {
    for (let i = 0; i < 200; i++) {
      const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      r.on('error', () => {});
      try {
        await r.connect();
        await r.ping();
        r.disconnect();
        return;
      } catch {
        r.disconnect();
        await new Promise((res) => setTimeout(res, 25));
      }
    }
    throw new Error('redis-server did not answer within 5 s');
  })();
  await Promise.race([ready, failed]);
  const onExit = () => child.kill('SIGKILL');
  process.once('exit', onExit);
  return {
    url,
    async stop() {
      process.off('exit', onExit);
      if (child.exitCode === null && child.signalCode === null) {
        await new Promise<void>((res) => {
          child.once('exit', () => res());
          child.kill('SIGTERM');
        });
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function startLocalS3(buckets: string[]): Promise<LocalService> {
  const name = 's3rver'; // a dev dependency: loaded by name so that builds without it still compile
  let S3rver: new (o: Record<string, unknown>) => { run(): Promise<{ port: number }>; close(): Promise<void>; httpServer?: Server };
  try {
    S3rver = ((await import(name)) as { default: typeof S3rver }).default;
  } catch {
    throw new Error('no local S3: s3rver is not installed (npm ci installs dev dependencies), or set KMFLEET_S3_ENDPOINT');
  }
  const dir = mkdtempSync(join(tmpdir(), 'kmfleet-demo-s3-'));
  const server = new S3rver({
    port: 0,
    address: '127.0.0.1',
    silent: true,
    directory: dir,
    configureBuckets: buckets.map((b) => ({ name: b })),
  });
  const { port } = await server.run();
  return {
    url: `http://127.0.0.1:${port}`,
    async stop() {
      server.httpServer?.closeAllConnections();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
