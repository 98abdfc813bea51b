/**
 * The `maxmemory-policy` check. BullMQ loses jobs under any evicting policy: workers refuse to start unless EVERY
 * server that holds kmfleet's keys is `noeviction` — one node, or each master of a Redis Cluster (the keys live in one
 * slot today, but a resharding moves that slot to another master, so all of them must be safe).
 * INFO is used, not CONFIG GET: managed Redis often renames CONFIG.
 */
import type { Cluster, Redis } from 'ioredis';
import { ConnectionConfigError } from './errors/connection-config-error.js';
import type { RedisClient } from './job-state.js';
import { isCluster } from './redis-factory.js';

export interface NodePolicy {
  /** host:port of the server */
  node: string;
  /** undefined when INFO does not report it */
  policy: string | undefined;
}

/** One server's maxmemory-policy. */
export async function maxmemoryPolicy(redis: Redis): Promise<string | undefined> {
  const info = await redis.info('memory');
  return /^maxmemory_policy:(\S+)/m.exec(info)?.[1];
}

/** A cluster is usable (its node list known) once it is ready: wait for that, or for it to give up. */
async function clusterReady(cluster: Cluster): Promise<void> {
  if (cluster.status === 'ready') return;
  if (cluster.status === 'wait') return cluster.connect();
  await new Promise<void>((resolve, reject) => {
    const onReady = () => (cluster.off('end', onEnd), resolve());
    const onEnd = () => (cluster.off('ready', onReady), reject(new Error('Redis Cluster connection ended before it was ready')));
    cluster.once('ready', onReady);
    cluster.once('end', onEnd);
  });
}

/** The policy of every server behind the client: the node itself, or each master of a cluster. */
export async function maxmemoryPolicies(client: RedisClient): Promise<NodePolicy[]> {
  if (!isCluster(client)) return [{ node: `${client.options.host}:${client.options.port}`, policy: await maxmemoryPolicy(client) }];
  await clusterReady(client);
  const masters = client.nodes('master');
  if (masters.length === 0) throw new ConnectionConfigError('Redis Cluster reports no master nodes');
  return Promise.all(masters.map(async (m) => ({ node: `${m.options.host}:${m.options.port}`, policy: await maxmemoryPolicy(m) })));
}

/** The first server whose policy evicts, or undefined when all are noeviction (or do not say). */
export async function evictingNode(client: RedisClient): Promise<NodePolicy | undefined> {
  return (await maxmemoryPolicies(client)).find((p) => p.policy !== undefined && p.policy !== 'noeviction');
}

export async function assertNoEviction(client: RedisClient): Promise<void> {
  const bad = await evictingNode(client);
  if (bad) {
    const where = isCluster(client) ? ` on cluster node ${bad.node}` : '';
    throw new ConnectionConfigError(
      `Redis maxmemory-policy is ${bad.policy}${where}; kmfleet needs noeviction (an evicting Redis silently loses jobs)`,
    );
  }
}
