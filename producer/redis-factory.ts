/**
 * The one place kmfleet opens a Redis connection: a single node or a Redis Cluster, decided once from the
 * connection options (producer/connection.ts: REDIS_URL, plus REDIS_CLUSTER_NODES for a cluster).
 *
 *   createRedisClient(connectionFromEnv(), 'producer')   fail fast: lazy, no offline queue, one retry per command
 *   createRedisClient(config.redis, 'worker')             never give up: maxRetriesPerRequest null, offline queue
 *
 * Both kinds are handed to BullMQ as instances (Queue / Worker `connection`); BullMQ duplicates them for its blocking
 * connection (on a Cluster with the same `redisOptions`, so maxRetriesPerRequest stays null) and reads the keys only
 * under the hash-tagged prefix (producer/keys.ts), so every script of a job runs in one slot.
 */
import { Cluster, Redis, type ClusterNode, type RedisOptions } from 'ioredis';
import { producerRedisOptions, workerRedisOptions, type RedisConnectionOptions } from './connection.js';
import type { RedisClient } from './job-state.js';
import { clusterOptions } from './redis-cluster.js';

export type RedisRole = 'producer' | 'worker';

export interface CreateRedisOptions {
  /** producer connect timeout (default 5000 ms) */
  connectTimeoutMs?: number;
  /** ioredis options to merge over the role's (e.g. lazyConnect: false for a producer-like exporter) */
  overrides?: RedisOptions;
}

/** The connection options (with or without `cluster`) as a connected-on-demand ioredis client. */
export function createRedisClient(conn: RedisConnectionOptions | RedisOptions, role: RedisRole, opts: CreateRedisOptions = {}): RedisClient {
  const { cluster, ...node } = conn as RedisConnectionOptions & RedisOptions;
  const roleOptions = role === 'producer' ? producerRedisOptions(node, opts.connectTimeoutMs) : workerRedisOptions(node);
  const nodeOptions: RedisOptions = { ...roleOptions, ...opts.overrides };
  if (cluster && cluster.length > 0) return new Cluster(cluster, clusterOptions(nodeOptions));
  return new Redis(nodeOptions);
}

export function isCluster(client: RedisClient): client is Cluster {
  return (client as Cluster).isCluster === true;
}

/** A caller-given ioredis client's options in the shape describeConnection takes (never with the password). */
export function clientConnectionOptions(client: RedisClient): Partial<RedisConnectionOptions> & { path?: string } {
  if (!isCluster(client)) return client.options;
  // startupNodes is private in ioredis' types but a plain field: the seed list this client was made with
  const seeds = (client as unknown as { startupNodes: ClusterNode[] }).startupNodes;
  const nodes = seeds.map((n) =>
    typeof n === 'string' ? { host: n, port: 6379 } : typeof n === 'number' ? { host: '127.0.0.1', port: n } : { host: n.host ?? '127.0.0.1', port: n.port ?? 6379 },
  );
  return { cluster: nodes, tls: client.options.redisOptions?.tls, username: client.options.redisOptions?.username };
}
