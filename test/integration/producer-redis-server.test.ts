// The shared test helper itself: every integration test of the project relies on it starting and stopping cleanly.
import { existsSync } from 'node:fs';
import { Redis as IORedis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { startRedisServer } from '../helpers/redis-server.js';

describe('test/helpers/redis-server', () => {
  it('starts on a free loopback port without persistence and stops cleanly', async () => {
    const a = await startRedisServer();
    const b = await startRedisServer();
    try {
      expect(a.port).not.toBe(b.port);
      const r = new IORedis(a.url, { lazyConnect: true });
      await r.connect();
      expect(await r.ping()).toBe('PONG');
      expect(await r.config('GET', 'appendonly')).toEqual(['appendonly', 'no']);
      expect(await r.config('GET', 'save')).toEqual(['save', '']);
      expect(await r.config('GET', 'maxmemory-policy')).toEqual(['maxmemory-policy', 'noeviction']);
      r.disconnect();
    } finally {
      await a.stop();
      await b.stop();
    }
    expect(a.pid).toBeUndefined();
    expect(existsSync(a.dir)).toBe(false);
  });

  it('supports a password, a maxmemory policy, and AOF that survives a SIGKILL + restart', async () => {
    const s = await startRedisServer({ password: 'p@ss:w/rd', appendonly: true, maxmemoryPolicy: 'allkeys-lru' });
    try {
      const noAuth = new IORedis({ host: s.host, port: s.port, lazyConnect: true, enableReadyCheck: false, maxRetriesPerRequest: 0 });
      await noAuth.connect();
      await expect(noAuth.get('x')).rejects.toThrow(/NOAUTH/);
      noAuth.disconnect();

      let r = new IORedis(s.url, { lazyConnect: true });
      await r.connect();
      expect(await r.config('GET', 'maxmemory-policy')).toEqual(['maxmemory-policy', 'allkeys-lru']);
      await r.set('kept', '1');
      r.disconnect();

      await s.kill('SIGKILL');
      expect(s.pid).toBeUndefined();
      await s.restart();
      r = new IORedis({ ...s.connection, lazyConnect: true });
      await r.connect();
      expect(await r.get('kept')).toBe('1');
      r.disconnect();
    } finally {
      await s.stop();
    }
  });
});

describe('test/helpers/redis-server with tls', () => {
  it('serves rediss:// only, trusted through tlsCa', async () => {
    const s = await startRedisServer({ tls: true, password: 'pw' });
    try {
      expect(s.url).toMatch(/^rediss:\/\/:pw@127\.0\.0\.1:\d+$/);
      const r = new IORedis({ ...s.connection, lazyConnect: true });
      await r.connect();
      expect(await r.ping()).toBe('PONG');
      r.disconnect();
      const untrusted = new IORedis({ host: s.host, port: s.port, password: 'pw', tls: {}, lazyConnect: true, retryStrategy: () => null });
      const errors: Error[] = [];
      untrusted.on('error', (e: Error) => errors.push(e));
      await expect(untrusted.connect()).rejects.toThrow();
      untrusted.disconnect();
      expect(errors.map((e) => e.message).join()).toMatch(/self-signed|certificate/i);
    } finally {
      await s.stop();
    }
  });
});
