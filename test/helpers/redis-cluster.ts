/**
 * A real Redis Cluster for tests: N redis-server processes (test/helpers/redis-server.ts, `--cluster-enabled yes`) on
 * random loopback ports whose cluster bus ports (port + 10000) are free too, joined by
 * `redis-cli --cluster create … --cluster-replicas 0 --cluster-yes`, ready once every node says `cluster_state:ok` and
 * knows all the others. `stop()` stops every server and removes the directory; a failed start stops what it started.
 *
 *   const cluster = await startRedisCluster();              // 3 masters, no replicas
 *   cluster.env         { REDIS_URL, REDIS_CLUSTER_NODES }  (for a worker / the CLI)
 *   cluster.connection  connection options with `cluster`   (for KmfleetClient / startQueueExporter)
 *   await cluster.nodeForKey('{kmfleet}:x')                 the node that serves a key's slot
 *   await cluster.stop();
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import type { RedisConnectionOptions } from '../../producer/connection.js';
import { freePort, startRedisServer, type RedisServerHandle } from './redis-server.js';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface RedisClusterOptions {
  /** masters (default 3: the smallest cluster redis-cli creates) */
  masters?: number;
  /** `--requirepass` (and `--masterauth`) on every node */
  password?: string;
  /** how long to wait for cluster_state:ok everywhere (default 20 s) */
  readyTimeoutMs?: number;
  /** redis-cli binary; default $REDIS_CLI_BIN or `redis-cli` on PATH */
  cliBin?: string;
}

export interface RedisClusterHandle {
  readonly nodes: RedisServerHandle[];
  readonly password: string | undefined;
  /** `127.0.0.1:p1,127.0.0.1:p2,…` */
  readonly nodeList: string;
  /** redis://[:password@]127.0.0.1:<first node>: the scheme and credentials for REDIS_URL */
  readonly url: string;
  /** REDIS_URL + REDIS_CLUSTER_NODES, as a pod would get them */
  readonly env: { REDIS_URL: string; REDIS_CLUSTER_NODES: string };
  /** connectionFromEnv(env)'s shape: the URL's options plus `cluster` */
  readonly connection: RedisConnectionOptions;
  /** A plain (non-cluster) connection to one node, closed by stop(). */
  nodeClient(node: RedisServerHandle): Redis;
  /** The node whose slot range holds `key` (CLUSTER KEYSLOT + CLUSTER SLOTS). */
  nodeForKey(key: string): Promise<RedisServerHandle>;
  /** Every key stored on each node (KEYS * per node: test data only), by node port. */
  keysByNode(pattern?: string): Promise<Map<number, string[]>>;
  stop(): Promise<void>;
}

/** A free port p with p + 10000 free too (the cluster bus), both ≤ 65535. */
async function freeClusterPort(): Promise<number> {
  const isFree = (port: number) =>
    new Promise<boolean>((resolve) => {
      const srv = createServer();
      srv.unref();
      srv.once('error', () => resolve(false));
      srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
    });
  for (let i = 0; i < 200; i++) {
    const p = await freePort();
    if (p + 10000 <= 65535 && (await isFree(p + 10000))) return p;
  }
  // the kernel's ephemeral range may sit high: try random ports below 55535
  for (let i = 0; i < 200; i++) {
    const p = 20000 + Math.floor(Math.random() * 30000);
    if ((await isFree(p)) && (await isFree(p + 10000))) return p;
  }
  throw new Error('no free port p with p + 10000 free too');
}

export async function startRedisCluster(opts: RedisClusterOptions = {}): Promise<RedisClusterHandle> {
  const masters = opts.masters ?? 3;
  const password = opts.password;
  const cli = opts.cliBin ?? process.env.REDIS_CLI_BIN ?? 'redis-cli';
  const dir = mkdtempSync(join(tmpdir(), 'kmfleet-cluster-'));
  const nodes: RedisServerHandle[] = [];
  const clients: Redis[] = [];
  const stop = async () => {
    for (const c of clients.splice(0)) c.disconnect();
    await Promise.all(nodes.map((n) => n.stop().catch(() => undefined)));
    rmSync(dir, { recursive: true, force: true });
  };
  const auth = password !== undefined ? ['-a', password, '--no-auth-warning'] : [];
  try {
    for (let i = 0; i < masters; i++) {
      let lastErr: unknown;
      for (let attempt = 0; attempt < 5 && nodes.length === i; attempt++) {
        const port = await freeClusterPort();
        try {
          nodes.push(
            await startRedisServer({
              port,
              password,
              args: [
                '--cluster-enabled', 'yes',
                '--cluster-config-file', join(dir, `nodes-${port}.conf`),
                '--cluster-node-timeout', '3000',
                ...(password !== undefined ? ['--masterauth', password] : []),
              ],
            }),
          );
        } catch (err) {
          lastErr = err; // the port (or its bus port) was taken meanwhile: another one
        }
      }
      if (nodes.length === i) throw lastErr;
    }
    const addrs = nodes.map((n) => `127.0.0.1:${n.port}`);
    try {
      await run(cli, [...auth, '--cluster', 'create', ...addrs, '--cluster-replicas', '0', '--cluster-yes'], { timeout: 30_000 });
    } catch (err) {
      const e = err as { code?: string; stdout?: string; stderr?: string; message: string };
      if (e.code === 'ENOENT') throw new Error(`cannot run ${cli}: apt-get install -y redis-tools (it comes with redis-server)`);
      throw new Error(`redis-cli --cluster create failed: ${e.message}\n${e.stdout ?? ''}${e.stderr ?? ''}`);
    }
    const nodeClient = (n: RedisServerHandle) => {
      const c = new Redis({ host: '127.0.0.1', port: n.port, password, lazyConnect: false, maxRetriesPerRequest: 1 });
      c.on('error', () => undefined);
      clients.push(c);
      return c;
    };
    const direct = nodes.map(nodeClient);
    // Ready: every node reports ok and knows all others (gossip may lag behind the create command's own check).
    const deadline = Date.now() + (opts.readyTimeoutMs ?? 20_000);
    for (;;) {
      const infos = await Promise.all(direct.map((c) => c.cluster('INFO').catch(() => '') as Promise<string>));
      const ok = infos.every((s) => /cluster_state:ok/.test(s) && new RegExp(`cluster_known_nodes:${masters}\\b`).test(s));
      if (ok) break;
      if (Date.now() > deadline) throw new Error(`Redis Cluster not ok after ${opts.readyTimeoutMs ?? 20_000} ms:\n${infos.join('\n---\n')}`);
      await sleep(100);
    }
    const nodeList = addrs.join(',');
    const url = `redis://${password !== undefined ? `:${encodeURIComponent(password)}@` : ''}${addrs[0]}`;
    const byPort = new Map(nodes.map((n) => [n.port, n]));
    return {
      nodes,
      password,
      nodeList,
      url,
      env: { REDIS_URL: url, REDIS_CLUSTER_NODES: nodeList },
      connection: {
        host: '127.0.0.1',
        port: nodes[0].port,
        ...(password !== undefined ? { password } : {}),
        cluster: nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
      },
      nodeClient,
      async nodeForKey(key: string) {
        const slot = Number(await direct[0].cluster('KEYSLOT', key));
        const ranges = (await direct[0].cluster('SLOTS')) as Array<[number, number, [string, number, ...unknown[]]]>;
        const owner = ranges.find(([from, to]) => slot >= from && slot <= to);
        const node = owner && byPort.get(Number(owner[2][1]));
        if (!node) throw new Error(`no node serves slot ${slot} of ${key}`);
        return node;
      },
      async keysByNode(pattern = '*') {
        const out = new Map<number, string[]>();
        await Promise.all(nodes.map(async (n, i) => out.set(n.port, (await direct[i].keys(pattern)).sort())));
        return out;
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
