/**
 * Redis connection settings: REDIS_URL parsing (redis:// and rediss:// with TLS, username, password, db),
 * the producer's fail-fast options and the worker's never-give-up options, and a description of a
 * connection that is safe to log (it never contains the password).
 *
 *   REDIS_URL=redis://[[user]:password@]host[:port][/db]      default redis://127.0.0.1:6379
 *   REDIS_URL=rediss://...                                    TLS (servername = host unless host is an IP)
 *   query: ?db=N (instead of /N)
 *   REDIS_CLUSTER_NODES=host:port,…                          Redis Cluster seed nodes; REDIS_URL then gives only the
 *                                                             scheme, user and password (producer/redis-cluster.ts)
 *   REDIS_PASSWORD=…                                          the password, for a REDIS_URL without one (its user part,
 *                                                             if any, is then the ACL user): the URL can live in a
 *                                                             ConfigMap, the password in a Secret (as is: no escaping)
 *
 * Connections are made in one place, producer/redis-factory.ts, which picks a node or a cluster from these options.
 */
import { isIP } from 'node:net';
import type { RedisOptions } from 'ioredis';
import { ConnectionConfigError } from './errors/connection-config-error.js';
import { describeCluster, parseClusterNodes, withClusterNodes, type RedisNode } from './redis-cluster.js';

export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

/** The subset of ioredis options a URL describes. */
export interface RedisConnectionOptions {
  host: string;
  port: number;
  username?: string;
  password?: string;
  db?: number;
  tls?: { servername?: string };
  /** Seed nodes of a Redis Cluster (REDIS_CLUSTER_NODES): set = cluster mode; host and port are then unused. */
  cluster?: RedisNode[];
}

/** The URL with any password replaced by ***, for messages and logs; also for unparseable input. */
export function redactRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    else if (u.username) u.username = '***'; // redis://password@host: a bare password in the user part
    return u.toString();
  } catch {
    // Not a URL: hide everything between the scheme and the last '@' of the authority.
    return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/]*@/i, '$1***@');
  }
}

export function parseRedisUrl(url: string): RedisConnectionOptions {
  let u: URL;
  try {
    u = new URL(url.trim());
  } catch {
    // Not echoed: an unparseable URL may hold a password anywhere.
    throw new ConnectionConfigError('REDIS_URL is not a valid URL (expected redis[s]://[[user]:password@]host[:port][/db])');
  }
  const scheme = u.protocol.replace(/:$/, '');
  if (scheme !== 'redis' && scheme !== 'rediss') {
    throw new ConnectionConfigError(`REDIS_URL must start with redis:// or rediss:// (got ${scheme}://)`);
  }
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  if (!host) throw new ConnectionConfigError(`REDIS_URL has no host: ${redactRedisUrl(url)}`);
  const port = u.port ? Number(u.port) : 6379;
  const out: RedisConnectionOptions = { host, port };
  const decode = (s: string, what: string) => {
    try {
      return decodeURIComponent(s);
    } catch {
      throw new ConnectionConfigError(`REDIS_URL has a badly escaped ${what}`);
    }
  };
  if (u.username && u.password) out.username = decode(u.username, 'username');
  // redis://:pw@host and redis://pw@host (no user) both mean AUTH pw (the second is what some providers hand out).
  if (u.password) out.password = decode(u.password, 'password');
  else if (u.username) out.password = decode(u.username, 'password');
  const dbText = u.pathname.replace(/^\/+|\/+$/g, '') || u.searchParams.get('db') || '';
  if (dbText !== '') {
    if (!/^\d{1,5}$/.test(dbText)) throw new ConnectionConfigError(`REDIS_URL database must be a number (got ${JSON.stringify(dbText)})`);
    out.db = Number(dbText);
  }
  if (scheme === 'rediss') out.tls = isIP(host) ? {} : { servername: host };
  return out;
}

/**
 * REDIS_URL from the environment (or the local default; `url` overrides it, e.g. a CLI flag), parsed; with
 * REDIS_CLUSTER_NODES, cluster mode.
 */
export function connectionFromEnv(env: NodeJS.ProcessEnv = process.env, url?: string): RedisConnectionOptions {
  const text = url || env.REDIS_URL || DEFAULT_REDIS_URL;
  const base = parseRedisUrl(text);
  const password = env.REDIS_PASSWORD;
  if (password) {
    const u = new URL(text.trim());
    if (u.username && !u.password) {
      // redis://app@host with REDIS_PASSWORD: `app` is the ACL user, not a bare password
      base.username = base.password;
    } else if (base.password !== undefined && base.password !== password) {
      // two different passwords: which one is meant can't be known, and guessing would hide a stale Secret
      throw new ConnectionConfigError('REDIS_URL and REDIS_PASSWORD give two different passwords: keep one of them');
    }
    base.password = password;
  }
  const nodes = env.REDIS_CLUSTER_NODES?.trim();
  return nodes ? withClusterNodes(base, parseClusterNodes(nodes)) : base;
}

/** `redis[s]://[user@]host:port[/db]` (or the cluster's nodes): what a message may say about a connection. */
export function describeConnection(opts: Partial<RedisConnectionOptions> & { path?: string }): string {
  if (opts.cluster) return describeCluster({ ...opts, cluster: opts.cluster });
  if (opts.path) return `unix:${opts.path}`;
  const scheme = opts.tls ? 'rediss' : 'redis';
  const host = (opts.host ?? '127.0.0.1').includes(':') ? `[${opts.host}]` : (opts.host ?? '127.0.0.1');
  const user = opts.username ? `${encodeURIComponent(opts.username)}@` : '';
  return `${scheme}://${user}${host}:${opts.port ?? 6379}${opts.db ? `/${opts.db}` : ''}`;
}

/**
 * Producers fail fast: no offline queue (a command while disconnected fails at once), one retry per
 * command, a short connect timeout. Reconnection continues in the background for long-lived clients.
 */
export function producerRedisOptions(base: RedisOptions, connectTimeoutMs = 5000): RedisOptions {
  return {
    ...base,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    connectTimeout: connectTimeoutMs,
    // disconnect() after a failed connect arms a timer of this length on the dead socket; ioredis' 2 s default
    // would keep a failing CLI alive for 2 s after it has reported the error.
    disconnectTimeout: 100,
    retryStrategy: (times: number) => Math.min(times * 200, 2000),
  };
}

/** Workers never give up (BullMQ requires maxRetriesPerRequest: null for blocking connections). */
export function workerRedisOptions(base: RedisOptions): RedisOptions {
  return { ...base, maxRetriesPerRequest: null, enableOfflineQueue: true };
}
