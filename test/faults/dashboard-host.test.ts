/**
 * DNS rebinding against `kmfleet dashboard`: a page on another site rebinds its name to 127.0.0.1 and becomes
 * same-origin with the dashboard, but its requests still carry its own name as Host. Real HTTP requests with forged
 * Host headers (node:http), against the real server on a real redis-server, and against the real CLI process:
 *   - every endpoint (static page and files, each API, each action with --allow-actions, unknown paths) answers 421 to
 *     a foreign Host (also a missing one, and names that only start like ours), leaks no job data, and changes nothing;
 *   - localhost, 127.0.0.1 and [::1] on any port (ssh tunnels), the bound address with its port (each address of the
 *     machine when bound to 0.0.0.0) and the `--allowed-host` names are answered;
 *   - a malformed --allowed-host is refused at start (exit 2).
 */
import { spawn, execFile } from 'node:child_process';
import { request } from 'node:http';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KmfleetClient } from '../../producer/client.js';
import { ArgumentError } from '../../producer/errors/index.js';
import { startDashboard, type DashboardServer } from '../../dashboard/server.js';
import { ensureDistBuilt } from '../helpers/dist-build.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';

const ROOT = join(import.meta.dirname, '..', '..');
const JOB = 'secret-job-7';
const MODEL = 'secret-model';

interface Answer {
  status: number;
  body: string;
}

/** One request with exactly this Host header (null: none at all), as a rebinding page's browser would send it. */
function send(port: number, method: string, path: string, host: string | null, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, method, path, setHost: false, headers: { ...(host === null ? {} : { Host: host }), ...headers } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const ENDPOINTS: [string, string, Record<string, string>?][] = [
  ['GET', '/'],
  ['GET', '/index.html'],
  ['GET', '/app.js'],
  ['HEAD', '/'],
  ['GET', '/favicon.ico'],
  ['GET', '/api/config'],
  ['GET', '/api/queue'],
  ['GET', '/api/jobs?state=waiting'],
  ['GET', `/api/jobs/${JOB}`],
  ['GET', `/api/jobs/${JOB}/iterations`],
  ['GET', `/api/models/${MODEL}/history`],
  ['POST', `/api/jobs/${JOB}/cancel`, { 'X-Kmfleet': 'cancel' }],
  ['POST', `/api/jobs/${JOB}/remove`, { 'X-Kmfleet': 'remove' }],
  ['POST', `/api/jobs/${JOB}/retry`, { 'X-Kmfleet': 'retry' }],
  ['POST', `/api/jobs/${JOB}/promote`, { 'X-Kmfleet': 'promote' }],
  ['DELETE', `/api/jobs/${JOB}`],
  ['GET', '/no/such/thing'],
];

describe('dashboard: only requests that name this server are answered', () => {
  let redis: RedisServerHandle;
  let client: KmfleetClient;
  let dash: DashboardServer;
  let port: number;

  beforeAll(async () => {
    redis = await startRedisServer();
    client = new KmfleetClient({ connection: redis.url });
    await client.enqueue({ dataset: { uri: 's3://data/x.npy' }, k: 4, output: 's3://out/runs', name: MODEL }, { jobId: JOB });
    dash = await startDashboard({ client, port: 0, actions: true, allowedHosts: ['kmfleet.example.com', 'proxy.internal:8443'] });
    port = Number(new URL(dash.url).port);
  });
  afterAll(async () => {
    await dash?.close();
    await client?.close();
    await redis?.stop();
  });

  it('refuses foreign Hosts with 421 on every endpoint, leaking nothing and changing nothing', async () => {
    const foreign = [
      `evil.example:${port}`,
      'evil.example',
      `EVIL.example:${port}`,
      `localhost.evil.example:${port}`,
      `127.0.0.1.nip.io:${port}`,
      `kmfleet.example.com.evil.example:${port}`,
      `proxy.internal:${port}`, // allowed on 8443 only
      `localhost:${port}@evil.example`,
      '',
      null,
    ];
    for (const host of foreign) {
      for (const [method, path, headers] of ENDPOINTS) {
        const r = await send(port, method, path, host, headers);
        // no Host at all: node's HTTP/1.1 parser answers 400 before the dashboard sees the request
        expect(r.status, `${method} ${path} Host ${JSON.stringify(host)}`).toBe(host === null ? 400 : 421);
        expect(r.body).not.toContain(JOB.replace('secret-', ''));
        expect(r.body).not.toContain('<html');
      }
    }
    const info = await client.get(JOB);
    expect(info?.state).toBe('waiting');
    expect(info?.cancelRequested).toBeFalsy();
  });

  it('answers loopback names on any port, and the allowed hosts', async () => {
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, `LocalHost:${port}`, 'localhost:9000', 'localhost',
      'kmfleet.example.com', 'kmfleet.example.com:443', 'proxy.internal:8443']) {
      const page = await send(port, 'GET', '/', host);
      expect(page.status, host).toBe(200);
      expect(page.body).toContain('<html');
      const job = await send(port, 'GET', `/api/jobs/${JOB}`, host);
      expect(job.status, host).toBe(200);
      expect(JSON.parse(job.body).id).toBe(JOB);
    }
  });

  it('bound to 0.0.0.0: answers each address of this machine with the bound port, and no other port', async () => {
    const wide = await startDashboard({ client, host: '0.0.0.0', port: 0 });
    try {
      const p = Number(new URL(wide.url).port);
      const v4 = Object.values(networkInterfaces()).flat().filter((a) => a && a.family === 'IPv4' && !a.internal).map((a) => a!.address);
      expect(v4.length).toBeGreaterThan(0);
      for (const addr of v4) {
        expect((await send(p, 'GET', '/api/config', `${addr}:${p}`)).status, addr).toBe(200);
        // (loopback names are answered on any port; the machine's other addresses only on the bound one)
        expect((await send(p, 'GET', '/api/config', `${addr}:${p + 1}`)).status, addr).toBe(421);
      }
      expect((await send(p, 'GET', '/api/config', `0.0.0.0:${p}`)).status).toBe(421);
      expect((await send(p, 'GET', '/api/config', `evil.example:${p}`)).status).toBe(421);
    } finally {
      await wide.close();
    }
  });

  it('refuses an allowed host that is not a host name', async () => {
    for (const bad of ['http://proxy.example', 'proxy.example/x', 'a b', '', 'proxy:99999']) {
      await expect(startDashboard({ client, port: 0, allowedHosts: [bad] }), bad).rejects.toBeInstanceOf(ArgumentError);
    }
  });

  it('`kmfleet dashboard --allowed-host` (the CLI process): foreign Host 421, the named proxy answered; a bad name exits 2', async () => {
    ensureDistBuilt();
    const proc = spawn(process.execPath, [join(ROOT, 'bin', 'kmfleet.js'), 'dashboard', '--port', '0', '--allow-actions', '--allowed-host', 'dash.example.org', '--allowed-host', 'gw.example.org:8443'], {
      env: { ...process.env, REDIS_URL: redis.url },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      let err = '';
      const url = await new Promise<string>((resolve, reject) => {
        proc.stderr!.on('data', (d) => {
          err += d;
          const m = /kmfleet dashboard: (http:\/\/\S+)/.exec(err);
          if (m) resolve(m[1]);
        });
        proc.once('exit', (code) => reject(new Error(`dashboard exited ${code}: ${err}`)));
      });
      const p = Number(new URL(url).port);
      expect((await send(p, 'GET', '/api/queue', `evil.example:${p}`)).status).toBe(421);
      expect((await send(p, 'POST', `/api/jobs/${JOB}/cancel`, `evil.example:${p}`, { 'X-Kmfleet': 'cancel' })).status).toBe(421);
      expect((await send(p, 'GET', '/', `gw.example.org:${p}`)).status).toBe(421);
      expect((await send(p, 'GET', '/', 'gw.example.org:8443')).status).toBe(200);
      const q = await send(p, 'GET', '/api/jobs', 'dash.example.org');
      expect(q.status).toBe(200);
      expect(q.body).toContain(JOB);
      expect((await client.get(JOB))?.cancelRequested).toBeFalsy();
    } finally {
      proc.kill('SIGTERM');
      await new Promise((r) => proc.once('exit', r));
    }

    const bad = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(process.execPath, [join(ROOT, 'bin', 'kmfleet.js'), 'dashboard', '--port', '0', '--allowed-host', 'https://dash.example.org'],
        { env: { ...process.env, REDIS_URL: redis.url }, timeout: 30_000 },
        (e, _out, stderr) => resolve({ code: e ? ((e as { code?: number }).code ?? 1) : 0, stderr })),
    );
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--allowed-host "https:\/\/dash\.example\.org" must be a host name/);
  });
});
