// The shared test helper itself: every integration test of the project relies on it starting and stopping cleanly.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

describe('test/helpers/redis-server cleanup', () => {
  it('a server dies with the process that started it, even when that process is SIGKILLed', async () => {
    // The helper, transpiled to plain JS (Node 20 runs no TypeScript), started from a child node process that
    // prints the server's pid and is then killed without any chance to clean up.
    const ts = (await import('typescript')).default;
    const src = readFileSync(new URL('../helpers/redis-server.ts', import.meta.url), 'utf8');
    const js = ts.transpileModule(src, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText;
    const dir = mkdtempSync(join(tmpdir(), 'kmfleet-helper-'));
    try {
      writeFileSync(join(dir, 'redis-server.mjs'), js);
      writeFileSync(join(dir, 'main.mjs'), `
        import { startRedisServer } from './redis-server.mjs';
        const s = await startRedisServer();
        console.log(JSON.stringify({ pid: s.pid, dir: s.dir }));
        setInterval(() => {}, 1000);`);
      const child = spawn(process.execPath, [join(dir, 'main.mjs')], { stdio: ['ignore', 'pipe', 'inherit'] });
      const line = await new Promise<string>((resolve, reject) => {
        let buf = '';
        child.stdout!.on('data', (d) => {
          buf += d;
          if (buf.includes('\n')) resolve(buf.split('\n')[0]);
        });
        child.on('exit', (code) => reject(new Error(`child exited ${code}`)));
      });
      const { pid, dir: serverDir } = JSON.parse(line) as { pid: number; dir: string };
      expect(alive(pid)).toBe(true);
      child.kill('SIGKILL');
      const deadline = Date.now() + 5000;
      while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      expect(alive(pid)).toBe(false);
      rmSync(serverDir, { recursive: true, force: true });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** Running (a zombie waiting for its reaper counts as dead). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return false;
  }
}
