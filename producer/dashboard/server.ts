/**
 * The dashboard's HTTP server (node:http, no framework): JSON endpoints over the SDK and the static page
 * (producer/dashboard/static/). Read-only, except POST /api/jobs/:id/cancel when `allowCancel` is set.
 *
 *   GET  /api/queue                    counts by state, recent jobs, schedules     (snapshot.ts)
 *   GET  /api/jobs/:id                 the job (KmfleetClient.get)
 *   GET  /api/jobs/:id/iterations      its iteration stream (readIterations)
 *   GET  /api/models/:name/history     a model's results, newest first
 *   POST /api/jobs/:id/cancel          KmfleetClient.cancel (only with allowCancel; header X-Kmfleet: cancel)
 *   GET  /api/config                   { allowCancel }
 *
 * The page polls these every second. Path parameters are URL-encoded by the page (scheduler job ids hold ':').
 * The custom header on cancel cannot be sent cross-site without a CORS preflight, which this server never
 * answers: another site open in the same browser cannot cancel jobs.
 *
 * Every request must name this server in its Host header (producer/allowed-hosts.ts), else 421 whatever the path: a
 * page on another site whose name is rebound to 127.0.0.1 (DNS rebinding) is same-origin with us, and would otherwise
 * read every endpoint and, with allowCancel, cancel jobs. Its requests carry its own name as Host.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { KmfleetClient } from '../client.js';
import { KmfleetInputError } from '../errors/kmfleet-error.js';
import { RedisUnavailableError } from '../errors/index.js';
import { hostAllowance } from '../allowed-hosts.js';
import { jobDetail, jobIterations, modelHistory, queueSnapshot } from './snapshot.js';

export interface DashboardOptions {
  client: KmfleetClient;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 8080; 0 = any free port. */
  port?: number;
  /** Serve POST /api/jobs/:id/cancel and show the cancel button. Default false. */
  allowCancel?: boolean;
  /** Directory of index.html, app.js, style.css; default: found next to this module or in the repo. */
  staticDir?: string;
  /**
   * Host names (`name` for any port, `name:port` for one) a reverse proxy forwards requests with, beyond the ones always
   * answered: localhost, 127.0.0.1, [::1] and the address the server is bound to (producer/allowed-hosts.ts).
   */
  allowedHosts?: readonly string[];
}

export interface DashboardServer {
  readonly server: Server;
  /** http://host:port/ */
  readonly url: string;
  close(): Promise<void>;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};
const STATIC_FILES = new Set(['index.html', 'app.js', 'chart.js', 'style.css', 'favicon.svg']);

const SECURITY_HEADERS = {
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
  // No inline script or style, nothing from elsewhere: even an escaping bug could not run injected code.
  'Content-Security-Policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
};

/** The static files: next to this module when run from source, in the repo's producer/ when run from dist/. */
export function findStaticDir(): string {
  const here = fileURLToPath(new URL('.', import.meta.url));
  const candidates = [join(here, 'static'), resolve(here, '../../../producer/dashboard/static')];
  const found = candidates.find((d) => existsSync(join(d, 'index.html')));
  if (!found) throw new Error(`dashboard static files not found (looked in ${candidates.join(', ')})`);
  return found;
}

class HttpError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

function send(res: ServerResponse, status: number, body: string | Buffer, type: string): void {
  res.writeHead(status, { ...SECURITY_HEADERS, 'Content-Type': type, 'Cache-Control': 'no-store' });
  res.end(body);
}

const sendJson = (res: ServerResponse, status: number, value: unknown) =>
  send(res, status, JSON.stringify(value), 'application/json; charset=utf-8');

/** A job id or model name from the path; ids with spaces can't exist (keys.ts refuses them). */
function decodeParam(raw: string): string {
  let value: string;
  try {
    value = decodeURIComponent(raw);
  } catch {
    throw new HttpError(400, 'bad URL encoding');
  }
  if (/\s/.test(value)) throw new HttpError(404, `${JSON.stringify(value)} not found`);
  return value;
}

export async function startDashboard(opts: DashboardOptions): Promise<DashboardServer> {
  const { client } = opts;
  const staticDir = opts.staticDir ?? findStaticDir();
  const allowCancel = opts.allowCancel ?? false;

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!allowance.allows(req.headers.host, req.socket.localPort)) {
      throw new HttpError(421, `Host ${JSON.stringify(req.headers.host ?? '')} is not a name of this dashboard; behind a reverse proxy, start it with --allowed-host NAME`);
    }
    const url = new URL(req.url ?? '/', 'http://dashboard');
    const parts = url.pathname.split('/').filter(Boolean);
    const method = req.method ?? 'GET';

    if (parts[0] === 'api') {
      const [, what, rawId, sub] = parts;
      if (method === 'GET' && what === 'config' && parts.length === 2) return sendJson(res, 200, { allowCancel });
      if (method === 'GET' && what === 'queue' && parts.length === 2) {
        const limit = Math.min(200, Math.max(1, Number(url.searchParams.get('limit')) || 50));
        return sendJson(res, 200, await queueSnapshot(client, { limit }));
      }
      if (what === 'jobs' && rawId && parts.length <= 4) {
        const id = decodeParam(rawId);
        if (method === 'GET' && sub === undefined) {
          const job = await jobDetail(client, id);
          return job ? sendJson(res, 200, job) : sendJson(res, 404, { error: `job ${id} not found` });
        }
        if (method === 'GET' && sub === 'iterations') return sendJson(res, 200, await jobIterations(client, id));
        if (method === 'POST' && sub === 'cancel') {
          if (!allowCancel) throw new HttpError(403, 'cancel is off (start the dashboard with --allow-cancel)');
          if (req.headers['x-kmfleet'] !== 'cancel') throw new HttpError(403, 'missing X-Kmfleet: cancel header');
          return sendJson(res, 200, await client.cancel(id));
        }
      }
      if (method === 'GET' && what === 'models' && rawId && sub === 'history' && parts.length === 4) {
        return sendJson(res, 200, await modelHistory(client, decodeParam(rawId)));
      }
      throw new HttpError(404, 'no such endpoint');
    }

    if (method !== 'GET' && method !== 'HEAD') throw new HttpError(405, 'method not allowed');
    // favicon.ico: what browsers ask for by themselves
    const file = parts.length === 0 ? 'index.html' : parts[0] === 'favicon.ico' ? 'favicon.svg' : parts.length === 1 ? parts[0] : '';
    if (!STATIC_FILES.has(file)) throw new HttpError(404, 'not found');
    send(res, 200, await readFile(join(staticDir, file)), TYPES[extname(file)] ?? 'application/octet-stream');
  }

  const server = createServer((req, res) => {
    route(req, res).catch((err: unknown) => {
      const status = err instanceof HttpError ? err.status
        : err instanceof KmfleetInputError ? 400
        : err instanceof RedisUnavailableError ? 503 : 500;
      if (!res.headersSent) sendJson(res, status, { error: err instanceof Error ? err.message : String(err) });
      else res.destroy();
    });
  });
  const host = opts.host ?? '127.0.0.1';
  // a mistyped allowed host fails here, before the port is taken
  const allowance = hostAllowance({ host, allowedHosts: opts.allowedHosts });
  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(opts.port ?? 8080, host, () => (server.off('error', fail), ok()));
  });
  const { port } = server.address() as AddressInfo;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  return {
    server,
    url: `http://${shownHost}:${port}/`,
    close: () =>
      new Promise<void>((ok) => {
        server.closeAllConnections();
        server.close(() => ok());
      }),
  };
}
