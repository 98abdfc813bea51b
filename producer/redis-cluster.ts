/**
 * Redis Cluster settings: the seed nodes (REDIS_CLUSTER_NODES), the ioredis `Cluster` options built from the
 * per-node options the producer or worker would use on a single node, and a description safe to log.
 *
 *   REDIS_CLUSTER_NODES=host:port[,host:port…]     seed nodes (any members; the rest are discovered); set = cluster mode
 *   REDIS_URL=rediss://[user:]password@any:6379   still the source of the scheme (TLS), user and password for EVERY
 *                                                  node; its host:port is not used in cluster mode; no /db (Cluster has db 0 only)
 *
 * Why the credentials stay in REDIS_URL: it is the one secret (a Kubernetes Secret); the node list is not secret and
 * may live in a ConfigMap. Why every kmfleet key works on a cluster: producer/keys.ts hash-tags them all `{prefix}`.
 */
import type { ClusterOptions, RedisOptions } from 'ioredis';
import type { RedisConnectionOptions } from './connection.js';
import { ConnectionConfigError } from './errors/connection-config-error.js';

export interface RedisNode {
  host: string;
  port: number;
}

/** `host:port,host:port` (port 6379 when omitted; IPv6 as `[::1]:6379`). */
export function parseClusterNodes(text: string): RedisNode[] {
  const items = text.split(',').map((s) => s.trim()).filter((s) => s !== '');
  if (items.length === 0) throw new ConnectionConfigError('REDIS_CLUSTER_NODES is empty (expected host:port[,host:port…])');
  return items.map((item) => {
    // Never echo an item that looks like a URL with credentials: the list is not meant to hold any.
    if (item.includes('@') || item.includes('/')) {
      throw new ConnectionConfigError('REDIS_CLUSTER_NODES holds host:port pairs only; put the scheme and password in REDIS_URL');
    }
    const m = /^(?:\[([^\]]+)\]|([^:\s]+))(?::(\d{1,5}))?$/.exec(item);
    const port = m?.[3] === undefined ? 6379 : Number(m[3]);
    if (!m || port < 1 || port > 65535) {
      throw new ConnectionConfigError(`REDIS_CLUSTER_NODES entry ${JSON.stringify(item)} is not host:port`);
    }
    return { host: m[1] ?? m[2], port };
  });
}

/** The URL's options plus seed nodes: cluster mode. A cluster has only database 0. */
export function withClusterNodes(base: RedisConnectionOptions, nodes: RedisNode[]): RedisConnectionOptions {
  if (base.db) throw new ConnectionConfigError(`Redis Cluster has only database 0: drop /${base.db} from REDIS_URL`);
  const { db: _db, ...rest } = base;
  return { ...rest, cluster: nodes };
}

/**
 * ioredis `Cluster` options. `nodeOptions` are what one node connection would get (producerRedisOptions or
 * workerRedisOptions): they become `redisOptions` (credentials, TLS, maxRetriesPerRequest — BullMQ reads the latter
 * there on a Cluster), without host/port/db. The offline queue and reconnection are the Cluster's own switches
 * (ioredis fixes them on the node connections), so they are set here from the node options.
 */
export function clusterOptions(nodeOptions: RedisOptions): ClusterOptions {
  const { host: _h, port: _p, db: _d, path: _path, lazyConnect, enableOfflineQueue, retryStrategy, ...redisOptions } = nodeOptions;
  if (redisOptions.tls) {
    // Each node is checked against its own address: one servername would be wrong for all nodes but one.
    const { servername: _s, ...tls } = redisOptions.tls;
    redisOptions.tls = tls;
  }
  return {
    redisOptions,
    lazyConnect: lazyConnect ?? false,
    enableOfflineQueue: enableOfflineQueue ?? true,
    ...(retryStrategy ? { clusterRetryStrategy: retryStrategy } : {}),
    // With TLS, keep seed hostnames as names (ioredis resolves them to IPs by default, and a certificate names the
    // host, not its IP): the documented setting for ElastiCache/MemoryDB and any TLS cluster behind DNS names.
    ...(redisOptions.tls ? { dnsLookup: (address: string, cb: (err: Error | null, address: string) => void) => cb(null, address) } : {}),
  };
}

/** `redis[s]://[user@]h1:p1,h2:p2 (cluster)`: what a message may say about a cluster connection. */
export function describeCluster(opts: { cluster: RedisNode[]; tls?: unknown; username?: string }): string {
  const scheme = opts.tls ? 'rediss' : 'redis';
  const user = opts.username ? `${encodeURIComponent(opts.username)}@` : '';
  const nodes = opts.cluster.map((n) => `${n.host.includes(':') ? `[${n.host}]` : n.host}:${n.port}`).join(',');
  return `${scheme}://${user}${nodes} (cluster)`;
}
