/**
 * A real S3 for tests: s3rver 3.7.1 in this process on a random free loopback port, in its own temp directory, with
 * buckets created up front, plus a client configured for it (path style, the s3rver compatibility switch on).
 *
 *   const s3 = await startS3Server({ buckets: ['data'] });
 *   s3.endpoint            http://127.0.0.1:PORT          s3.env     { KMFLEET_S3_ENDPOINT, KMFLEET_S3_COMPAT, AWS_* } for child processes
 *   s3.handle.client       an S3Client (worker/s3/client.ts)   s3.settings   the settings to build more clients
 *   await s3.put('data', 'x.npy', buf); await s3.get('data', 'x.npy'); await s3.keys('data', 'prefix/')
 *   await s3.stop();       closes open keep-alive sockets first, so close() never hangs; removes the directory
 *
 * Keys are listed from s3rver's directory, not with ListObjectsV2 (which needs --openssl-legacy-provider on Node ≥ 17).
 */
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import type { Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join, relative, sep } from 'node:path';
import { createS3, type S3Handle, type S3Settings } from '../../worker/s3/client.js';
import { getObjectBuffer, putObjectBuffer } from '../../worker/s3/objects.js';

export interface S3ServerHandle {
  readonly endpoint: string;
  readonly port: number;
  readonly dir: string;
  readonly settings: S3Settings;
  readonly handle: S3Handle;
  /** Environment for a child worker process (KMFLEET_S3_ENDPOINT, KMFLEET_S3_COMPAT, credentials, region). */
  readonly env: Record<string, string>;
  put(bucket: string, key: string, body: Buffer): Promise<string | undefined>;
  get(bucket: string, key: string): Promise<Buffer>;
  /** Keys under a prefix, sorted (from the server's directory). */
  keys(bucket: string, prefix?: string): string[];
  stop(): Promise<void>;
}

export async function startS3Server(opts: { buckets?: string[]; silent?: boolean } = {}): Promise<S3ServerHandle> {
  // s3rver ships no types: the little used here, typed by hand
  const name = 's3rver';
  const { default: S3rver } = (await import(name)) as {
    default: new (o: Record<string, unknown>) => { run(): Promise<{ port: number }>; close(): Promise<void>; httpServer?: Server };
  };
  const dir = mkdtempSync(join(tmpdir(), 'kmfleet-s3-'));
  const server = new S3rver({
    port: 0,
    address: '127.0.0.1',
    silent: opts.silent ?? true,
    directory: dir,
    configureBuckets: (opts.buckets ?? []).map((name) => ({ name })),
  });
  const address = await server.run();
  const port = address.port;
  const endpoint = `http://127.0.0.1:${port}`;
  const settings: S3Settings = {
    endpoint,
    forcePathStyle: true,
    region: 'us-east-1',
    compat: 's3rver',
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    maxAttempts: 3,
    retry: { budgetMs: 10_000, attempts: 3, baseMs: 20, maxMs: 200 },
  };
  const handle = createS3(settings);
  let stopped = false;
  const keys = (bucket: string, prefix = ''): string[] => {
    const root = join(dir, bucket);
    const out: string[] = [];
    const walk = (d: string) => {
      let entries: string[];
      try {
        entries = readdirSync(d);
      } catch {
        return;
      }
      for (const name of entries) {
        const p = join(d, name);
        if (statSync(p).isDirectory()) walk(p);
        else if (name.endsWith('._S3rver_object')) {
          const key = relative(root, p).split(sep).join('/').replace(/\._S3rver_object$/, '');
          if (key.startsWith(prefix)) out.push(key);
        }
      }
    };
    walk(root);
    return out.sort();
  };
  return {
    endpoint,
    port,
    dir,
    settings,
    handle,
    env: {
      KMFLEET_S3_ENDPOINT: endpoint,
      KMFLEET_S3_COMPAT: 's3rver',
      KMFLEET_S3_FORCE_PATH_STYLE: 'true',
      AWS_ACCESS_KEY_ID: 'S3RVER',
      AWS_SECRET_ACCESS_KEY: 'S3RVER',
      AWS_REGION: 'us-east-1',
    },
    put: (bucket, key, body) => putObjectBuffer(handle, { bucket, key }, body),
    get: (bucket, key) => getObjectBuffer(handle, { bucket, key }),
    keys,
    async stop() {
      if (stopped) return;
      stopped = true;
      handle.destroy();
      server.httpServer?.closeAllConnections();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
