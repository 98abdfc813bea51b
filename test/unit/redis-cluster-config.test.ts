// Redis Cluster configuration without a server: REDIS_CLUSTER_NODES parsing, what REDIS_URL still gives in cluster
// mode, the Cluster options of producers and workers, and descriptions that never carry the password.
// (test/integration/redis-cluster.test.ts runs all of it against a real cluster.)
import { Cluster, Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { connectionFromEnv, describeConnection, producerRedisOptions, workerRedisOptions } from '../../producer/connection.js';
import { ConnectionConfigError } from '../../producer/errors/index.js';
import { clusterOptions, parseClusterNodes } from '../../producer/redis-cluster.js';
import { clientConnectionOptions, createRedisClient, isCluster } from '../../producer/redis-factory.js';

describe('REDIS_CLUSTER_NODES', () => {
  it('parses host:port lists (default port 6379, IPv6 in brackets, spaces and empty items ignored)', () => {
    expect(parseClusterNodes('a:7000, b:7001,,c')).toEqual([
      { host: 'a', port: 7000 }, { host: 'b', port: 7001 }, { host: 'c', port: 6379 },
    ]);
    expect(parseClusterNodes('[::1]:7002')).toEqual([{ host: '::1', port: 7002 }]);
  });

  it('refuses empty lists, bad ports and URLs, without echoing a password', () => {
    expect(() => parseClusterNodes(' , ')).toThrow(ConnectionConfigError);
    expect(() => parseClusterNodes('a:70000')).toThrow(/"a:70000" is not host:port/);
    expect(() => parseClusterNodes('a:b:c')).toThrow(/not host:port/);
    let msg = '';
    try {
      parseClusterNodes('redis://:hunter2@a:1');
    } catch (e) {
      msg = (e as Error).message;
    }
    expect(msg).toMatch(/host:port pairs only; put the scheme and password in REDIS_URL/);
    expect(msg).not.toContain('hunter2');
  });

  it('cluster mode takes scheme, user and password from REDIS_URL; single node stays as it was', () => {
    expect(connectionFromEnv({ REDIS_URL: 'redis://r:1' })).toStrictEqual({ host: 'r', port: 1 });
    const c = connectionFromEnv({ REDIS_URL: 'rediss://app:p%40ss@seed.example:6380', REDIS_CLUSTER_NODES: 'n1:7000,n2:7001' });
    expect(c).toMatchObject({
      username: 'app', password: 'p@ss', tls: { servername: 'seed.example' },
      cluster: [{ host: 'n1', port: 7000 }, { host: 'n2', port: 7001 }],
    });
    // no REDIS_URL: plain, no password
    expect(connectionFromEnv({ REDIS_CLUSTER_NODES: 'n1:7000' })).toMatchObject({ cluster: [{ host: 'n1', port: 7000 }] });
    expect(connectionFromEnv({ REDIS_CLUSTER_NODES: 'n1:7000' }).password).toBeUndefined();
    // the CLI's --redis-url overrides REDIS_URL, the cluster nodes still apply
    expect(connectionFromEnv({ REDIS_URL: 'redis://:a@x:1', REDIS_CLUSTER_NODES: 'n1:7000' }, 'redis://:b@y:2')).toMatchObject({ password: 'b', cluster: [{ host: 'n1', port: 7000 }] });
  });

  it('a cluster has only database 0', () => {
    expect(() => connectionFromEnv({ REDIS_URL: 'redis://h:1/2', REDIS_CLUSTER_NODES: 'n1:7000' })).toThrow(/only database 0/);
    expect(connectionFromEnv({ REDIS_URL: 'redis://h:1/0', REDIS_CLUSTER_NODES: 'n1:7000' }).db).toBeUndefined();
  });

  it('describes a cluster by its seed nodes, scheme and user, never the password', () => {
    const c = connectionFromEnv({ REDIS_URL: 'rediss://app:hunter2@seed:6380', REDIS_CLUSTER_NODES: 'n1:7000,[::1]:7001' });
    expect(describeConnection(c)).toBe('rediss://app@n1:7000,[::1]:7001 (cluster)');
  });
});

describe('REDIS_PASSWORD', () => {
  it('gives the password of a REDIS_URL without one, as is (no URL escaping), also to a cluster', () => {
    const pw = 'p@ss:w/rd%41 x';
    expect(connectionFromEnv({ REDIS_URL: 'rediss://cache.example:6380/2', REDIS_PASSWORD: pw })).toMatchObject({ host: 'cache.example', port: 6380, db: 2, password: pw });
    // with REDIS_PASSWORD, the URL's lone user part is the ACL user (without it, a bare password)
    expect(connectionFromEnv({ REDIS_URL: 'redis://app@h:1', REDIS_PASSWORD: pw })).toMatchObject({ username: 'app', password: pw });
    expect(connectionFromEnv({ REDIS_URL: 'redis://app@h:1' })).toEqual({ host: 'h', port: 1, password: 'app' });
    expect(connectionFromEnv({ REDIS_URL: 'redis://h:1', REDIS_PASSWORD: pw, REDIS_CLUSTER_NODES: 'n1:7000' })).toMatchObject({ password: pw, cluster: [{ host: 'n1', port: 7000 }] });
    expect(connectionFromEnv({ REDIS_URL: 'redis://h:1', REDIS_PASSWORD: '' }).password).toBeUndefined();
    expect(describeConnection(connectionFromEnv({ REDIS_URL: 'redis://h:1', REDIS_PASSWORD: pw }))).not.toContain('p@ss');
  });

  it('refuses two different passwords without echoing either; the same one twice is fine', () => {
    expect(() => connectionFromEnv({ REDIS_URL: 'redis://:first-secret@h:1', REDIS_PASSWORD: 'second-secret' })).toThrow(/two different passwords/);
    try {
      connectionFromEnv({ REDIS_URL: 'redis://:first-secret@h:1', REDIS_PASSWORD: 'second-secret' });
    } catch (err) {
      expect((err as Error).message).not.toMatch(/first-secret|second-secret/);
    }
    expect(connectionFromEnv({ REDIS_URL: 'redis://:same@h:1', REDIS_PASSWORD: 'same' }).password).toBe('same');
  });
});

describe('Cluster options', () => {
  it('producers fail fast: lazy, no offline queue, one retry per command, a bounded retry strategy', () => {
    const o = clusterOptions(producerRedisOptions({ host: 'h', port: 1, password: 'pw', db: 0 }, 1234));
    expect(o.lazyConnect).toBe(true);
    expect(o.enableOfflineQueue).toBe(false);
    expect(o.clusterRetryStrategy?.(50)).toBe(2000);
    expect(o.redisOptions).toMatchObject({ password: 'pw', maxRetriesPerRequest: 1, connectTimeout: 1234 });
    for (const k of ['host', 'port', 'db', 'lazyConnect', 'enableOfflineQueue', 'retryStrategy']) expect(o.redisOptions).not.toHaveProperty(k);
  });

  it('workers never give up: maxRetriesPerRequest null in redisOptions (where BullMQ checks it on a Cluster), offline queue on', () => {
    const o = clusterOptions(workerRedisOptions({ host: 'h', port: 1 }));
    expect(o.redisOptions?.maxRetriesPerRequest).toBeNull();
    expect(o.enableOfflineQueue).toBe(true);
    expect(o.lazyConnect).toBe(false);
    expect(o.clusterRetryStrategy).toBeUndefined(); // ioredis' default: retries forever
  });

  it('TLS: no single servername for all nodes, seed hostnames are not resolved to IPs', async () => {
    const o = clusterOptions(workerRedisOptions({ host: 'seed', port: 1, tls: { servername: 'seed' } }));
    expect(o.redisOptions?.tls).toEqual({});
    const looked = await new Promise<string>((resolve) => o.dnsLookup!('node-1.example', (_e, a) => resolve(a)));
    expect(looked).toBe('node-1.example');
    expect(clusterOptions(workerRedisOptions({ host: 'h', port: 1 })).dnsLookup).toBeUndefined();
  });

  it('the factory makes a Cluster for cluster options and a Redis otherwise', async () => {
    const conn = connectionFromEnv({ REDIS_URL: 'redis://:pw@x:1', REDIS_CLUSTER_NODES: '127.0.0.1:7000,127.0.0.1:7001' });
    const cl = createRedisClient(conn, 'producer');
    const node = createRedisClient(connectionFromEnv({ REDIS_URL: 'redis://:pw@x:1' }), 'producer');
    try {
      expect(cl).toBeInstanceOf(Cluster);
      expect(isCluster(cl)).toBe(true);
      expect(cl.status).toBe('wait'); // lazy: nothing connected yet
      expect((cl as Cluster).options.redisOptions).toMatchObject({ password: 'pw', maxRetriesPerRequest: 1 });
      expect(describeConnection(clientConnectionOptions(cl))).toBe('redis://127.0.0.1:7000,127.0.0.1:7001 (cluster)');
      expect(node).toBeInstanceOf(Redis);
      expect(isCluster(node)).toBe(false);
      expect(describeConnection(clientConnectionOptions(node))).toBe('redis://x:1');
    } finally {
      cl.disconnect();
      node.disconnect();
    }
  });
});
