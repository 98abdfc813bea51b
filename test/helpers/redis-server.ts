/**
 * A real redis-server for tests: started on a random free loopback port, in its own temp directory,
 * stopped (and its directory removed) by `stop()`. Used by every integration and fault test of the project.
 *
 *   const redis = await startRedisServer();               // --save '' --appendonly no
 *   const redis = await startRedisServer({ appendonly: true, password: 's3cret', maxmemoryPolicy: 'noeviction' });
 *   new IORedis(redis.url)  |  new Queue('q', { connection: redis.connection })
 *   await redis.kill('SIGKILL'); await redis.restart();   // fault tests: same port, same dir (AOF survives)
 *   await redis.stop();
 *   const tls = await startRedisServer({ tls: true });    // TLS only: rediss://127.0.0.1:port, trust tls.tlsCa
 *
 * Readiness is a real PING answered with PONG (after AUTH when a password is set), not a log line.
 * Children are SIGKILLed when the test process exits — also when it is killed: where util-linux `setpriv` exists,
 * the server runs with a parent-death signal — so a failed or forgotten stop() never leaves a server behind.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, connect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface RedisServerOptions {
  /** AOF persistence (`--appendonly yes --appendfsync always`); default off. */
  appendonly?: boolean;
  /** RDB snapshots as in `--save`; default '' (none). */
  save?: string;
  /** `--requirepass`; the URL and connection options then carry it. */
  password?: string;
  /** `--maxmemory-policy` (redis' default is noeviction; workers refuse anything else). */
  maxmemoryPolicy?: string;
  /** `--maxmemory`, e.g. '64mb'. */
  maxmemory?: string;
  /** A fixed port instead of a random free one. */
  port?: number;
  /** Data directory; default a fresh temp dir removed on stop(). */
  dir?: string;
  /** Extra raw arguments, e.g. ['--notify-keyspace-events', 'KEA']. */
  args?: string[];
  /** How long to wait for PONG; default 10 s. */
  startTimeoutMs?: number;
  /** redis-server binary; default $REDIS_SERVER_BIN or `redis-server` on PATH. */
  bin?: string;
  /**
   * Serve TLS only (plain port off), with a fresh self-signed certificate for 127.0.0.1/localhost made by the
   * `openssl` CLI. Clients must trust `tlsCa`; the URL is rediss://.
   */
  tls?: boolean;
}

export interface RedisServerHandle {
  readonly host: string;
  readonly port: number;
  readonly password: string | undefined;
  /** redis://[:password@]127.0.0.1:port (rediss:// with tls) */
  readonly url: string;
  /** For ioredis / BullMQ: { host, port, password?, tls? } (tls trusts tlsCa). */
  readonly connection: { host: string; port: number; password?: string; tls?: { ca: string } };
  /** PEM of the self-signed certificate when started with tls. */
  readonly tlsCa: string | undefined;
  readonly dir: string;
  /** pid of the running server, undefined while stopped. */
  readonly pid: number | undefined;
  /** Output of the server so far (stdout + stderr), for failure messages. */
  log(): string;
  /** Send a signal and wait until the process has exited (SIGKILL simulates a crash). */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Start again on the same port and directory (after kill/stop with keepDir). */
  restart(): Promise<void>;
  /** SIGTERM, wait for exit, remove the temp dir (unless `keepDir` or a caller-given dir). Idempotent. */
  stop(opts?: { keepDir?: boolean }): Promise<void>;
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const child of live) {
      try {
        child.kill('SIGKILL');
      } catch {
        /* already gone */
      }
    }
  });
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

function encode(...parts: string[]): string {
  return `*${parts.length}\r\n` + parts.map((p) => `$${Buffer.byteLength(p)}\r\n${p}\r\n`).join('');
}

/** One PING over a raw socket (after AUTH if needed); true on +PONG. */
function ping(port: number, password: string | undefined, ca?: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock: Socket = ca
      ? tlsConnect({ host: '127.0.0.1', port, ca, servername: 'localhost' })
      : connect({ host: '127.0.0.1', port });
    let buf = '';
    const done = (ok: boolean) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(500, () => done(false));
    sock.on('error', () => done(false));
    sock.on(ca ? 'secureConnect' : 'connect', () => {
      sock.write((password !== undefined ? encode('AUTH', password) : '') + encode('PING'));
    });
    sock.on('data', (d) => {
      buf += d.toString('utf8');
      if (buf.includes('+PONG')) done(true);
      else if (buf.includes('-LOADING')) done(false);
      else if (/^-(?!LOADING)/m.test(buf)) done(false);
    });
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let setprivUsable: boolean | undefined;
/** `setpriv --pdeathsig SIGKILL` (util-linux): the server dies with the process that started it. */
function pdeathsigPrefix(bin: string): string[] {
  if (setprivUsable === undefined) {
    setprivUsable =
      existsSync('/usr/bin/setpriv') &&
      spawnSync('/usr/bin/setpriv', ['--pdeathsig', 'SIGKILL', '--', bin, '--version'], { stdio: 'ignore' }).status === 0;
  }
  return setprivUsable ? ['--pdeathsig', 'SIGKILL', '--', bin] : [];
}

export async function startRedisServer(opts: RedisServerOptions = {}): Promise<RedisServerHandle> {
  installExitHook();
  const bin = opts.bin ?? process.env.REDIS_SERVER_BIN ?? 'redis-server';
  const ownDir = opts.dir === undefined;
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), 'kmfleet-redis-'));
  const timeout = opts.startTimeoutMs ?? 10_000;
  const password = opts.password;
  let port = opts.port ?? 0;
  let child: ChildProcess | undefined;
  let output = '';
  let tlsCa: string | undefined;
  if (opts.tls) {
    // EC keys: generated in milliseconds, unlike RSA.
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
      '-keyout', join(dir, 'tls.key'), '-out', join(dir, 'tls.crt'), '-subj', '/CN=localhost',
      '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1',
    ], { stdio: 'ignore' });
    tlsCa = readFileSync(join(dir, 'tls.crt'), 'utf8');
  }

  const args = (p: number): string[] => {
    const a = opts.tls
      ? ['--port', '0', '--tls-port', String(p), '--tls-cert-file', join(dir, 'tls.crt'),
          '--tls-key-file', join(dir, 'tls.key'), '--tls-ca-cert-file', join(dir, 'tls.crt'), '--tls-auth-clients', 'no']
      : ['--port', String(p)];
    a.push('--bind', '127.0.0.1', '--dir', dir, '--save', opts.save ?? '');
    a.push('--appendonly', opts.appendonly ? 'yes' : 'no');
    if (opts.appendonly) a.push('--appendfsync', 'always');
    if (password !== undefined) a.push('--requirepass', password);
    if (opts.maxmemoryPolicy) a.push('--maxmemory-policy', opts.maxmemoryPolicy);
    if (opts.maxmemory) a.push('--maxmemory', opts.maxmemory);
    a.push('--daemonize', 'no', '--protected-mode', 'no', '--loglevel', 'notice');
    return a.concat(opts.args ?? []);
  };

  /** Spawn and wait for PONG; false if the process died first (e.g. the port was taken meanwhile). */
  const launch = async (p: number): Promise<boolean> => {
    const wrap = pdeathsigPrefix(bin);
    const c = wrap.length
      ? spawn('/usr/bin/setpriv', [...wrap, ...args(p)], { stdio: ['ignore', 'pipe', 'pipe'] })
      : spawn(bin, args(p), { stdio: ['ignore', 'pipe', 'pipe'] });
    child = c;
    live.add(c);
    let exited = false;
    let spawnError: Error | undefined;
    c.on('error', (e) => {
      spawnError = e;
      exited = true;
    });
    c.on('exit', () => {
      exited = true;
      live.delete(c);
    });
    c.stdout!.on('data', (d) => (output += d.toString('utf8')));
    c.stderr!.on('data', (d) => (output += d.toString('utf8')));
    const deadline = Date.now() + timeout;
    while (Date.now() < deadline) {
      if (spawnError) {
        throw new Error(
          `cannot start ${bin}: ${spawnError.message}` +
            ((spawnError as NodeJS.ErrnoException).code === 'ENOENT' ? ' (apt-get install -y redis-server)' : ''),
        );
      }
      if (exited) return false;
      if (await ping(p, password, tlsCa)) return true;
      await sleep(20);
    }
    c.kill('SIGKILL');
    throw new Error(`redis-server on port ${p} not ready after ${timeout} ms:\n${output.slice(-2000)}`);
  };

  const start = async (): Promise<void> => {
    const fixed = port !== 0;
    for (let attempt = 0; attempt < (fixed ? 1 : 5); attempt++) {
      const p = fixed ? port : await freePort();
      if (await launch(p)) {
        port = p;
        return;
      }
    }
    throw new Error(`redis-server exited during start-up:\n${output.slice(-2000)}`);
  };

  const waitExit = (c: ChildProcess, signal: NodeJS.Signals): Promise<void> =>
    new Promise((resolve) => {
      if (c.exitCode !== null || c.signalCode !== null) return resolve();
      const t = setTimeout(() => c.kill('SIGKILL'), 5_000);
      c.once('exit', () => {
        clearTimeout(t);
        resolve();
      });
      c.kill(signal);
    });

  await start();

  const handle: RedisServerHandle = {
    host: '127.0.0.1',
    get port() {
      return port;
    },
    password,
    get url() {
      const scheme = tlsCa ? 'rediss' : 'redis';
      return `${scheme}://${password !== undefined ? `:${encodeURIComponent(password)}@` : ''}127.0.0.1:${port}`;
    },
    get connection() {
      return {
        host: '127.0.0.1',
        port,
        ...(password !== undefined ? { password } : {}),
        ...(tlsCa ? { tls: { ca: tlsCa } } : {}),
      };
    },
    tlsCa,
    dir,
    get pid() {
      return child && child.exitCode === null && child.signalCode === null ? child.pid : undefined;
    },
    log: () => output,
    async kill(signal: NodeJS.Signals = 'SIGKILL') {
      if (child) await waitExit(child, signal);
    },
    async restart() {
      if (child && child.exitCode === null && child.signalCode === null) await waitExit(child, 'SIGTERM');
      if (!(await launch(port))) throw new Error(`redis-server did not restart on port ${port}:\n${output.slice(-2000)}`);
    },
    async stop(o: { keepDir?: boolean } = {}) {
      if (child) await waitExit(child, 'SIGTERM');
      if (ownDir && !o.keepDir) rmSync(dir, { recursive: true, force: true });
    },
  };
  return handle;
}

/** Run `fn` against a fresh server and always stop it. */
export async function withRedisServer<T>(
  fn: (server: RedisServerHandle) => Promise<T>,
  opts?: RedisServerOptions,
): Promise<T> {
  const server = await startRedisServer(opts);
  try {
    return await fn(server);
  } finally {
    await server.stop();
  }
}
