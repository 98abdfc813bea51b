/**
 * The dashboard as a fastify plugin: the page (static/) and its JSON API over the SDK, mountable under any prefix of
 * an app of yours, or served alone by `kmfleet dashboard` (server.ts).
 *
 *   app.register(dashboardPlugin, { prefix: '/ops/kmfleet', client, hosts: hostAllowance({ host, allowedHosts }) });
 *
 * Paths, relative to the mount point (the page uses relative URLs only, so a reverse proxy may add its own sub-path):
 *
 *   GET  /  /index.html /app.js /chart.js /style.css /favicon.svg   the page (the prefix without '/' redirects to it)
 *   GET  api/config                     { actions }: whether the action buttons are shown
 *   GET  api/queue                      counts by state, schedules                              (snapshot.ts)
 *   GET  api/jobs?state=&offset=&limit= one page of jobs: state all (default) or one of QUEUE_STATES
 *   GET  api/jobs/:id                   the job (KmfleetClient.get)
 *   GET  api/jobs/:id/iterations        its iteration stream
 *   GET  api/models/:name/history       a model's results, newest first
 *   POST api/jobs/:id/{cancel,retry,remove,promote}   the SDK call of that name; only with `actions`, and only with
 *                                       the header `X-Kmfleet: <action>`
 *
 * The header on actions cannot be sent cross-site without a CORS preflight, which is never answered: another site open
 * in the same browser cannot act on jobs. Every request must name this server in its Host header when `hosts` is given
 * (producer/allowed-hosts.ts; 421 otherwise): a DNS-rebinding page is same-origin with us but sends its own name. An
 * app that mounts the plugin without `hosts` must check Host itself (and put its own login in front: there is none).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { HostAllowance } from '../producer/allowed-hosts.js';
import type { KmfleetClient } from '../producer/client.js';
import { KmfleetError, KmfleetInputError } from '../errors/index.js';
import { RedisUnavailableError } from '../producer/errors/index.js';
import { jobDetail, jobIterations, jobPage, modelHistory, queueSnapshot } from './snapshot.js';

export interface DashboardPluginOptions {
  client: KmfleetClient;
  /** Serve the job actions (cancel, retry, remove, promote) and show their buttons. Default false: read-only. */
  actions?: boolean;
  /** Refuse (421) requests whose Host header this does not allow; without it the mounting app checks Host. */
  hosts?: HostAllowance;
  /** Directory of the page's files; default: found next to this module or in the package (findStaticDir). */
  staticDir?: string;
}

export const DASHBOARD_ACTIONS = ['cancel', 'retry', 'remove', 'promote'] as const;
export type DashboardAction = (typeof DASHBOARD_ACTIONS)[number];

const STATIC_FILES: Record<string, string> = {
  'index.html': 'text/html; charset=utf-8',
  'app.js': 'text/javascript; charset=utf-8',
  'chart.js': 'text/javascript; charset=utf-8',
  'style.css': 'text/css; charset=utf-8',
  'favicon.svg': 'image/svg+xml',
};

const SECURITY_HEADERS = {
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
  'Cache-Control': 'no-store',
  // No inline script or style, nothing from elsewhere: even an escaping bug could not run injected code.
  'Content-Security-Policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
};

/** The page's files: next to this module when run from source, in the package's dashboard/ when run from dist/. */
export function findStaticDir(): string {
  const here = fileURLToPath(new URL('.', import.meta.url));
  const candidates = [join(here, 'static'), resolve(here, '../../dashboard/static')];
  const found = candidates.find((d) => existsSync(join(d, 'index.html')));
  if (!found) throw new Error(`dashboard static files not found (looked in ${candidates.join(', ')})`);
  return found;
}

/** A refusal the dashboard answers with its own HTTP status (404, 403, 421). */
export class DashboardHttpError extends KmfleetError {
  readonly code = 'HTTP_ANSWER';
  constructor(readonly statusCode: number, message: string) {
    super(message);
  }
}

export function hostRefusal(host: string | undefined): DashboardHttpError {
  return new DashboardHttpError(421, `Host ${JSON.stringify(host ?? '')} is not a name of this dashboard; behind a reverse proxy, start it with --allowed-host NAME`);
}

/** A failure as the page reads it: `{ error }` with the status it means. */
export function errorAnswer(err: unknown): { status: number; error: string } {
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof DashboardHttpError) return { status: err.statusCode, error: message };
  if (err instanceof KmfleetInputError) return { status: 400, error: message };
  if (err instanceof RedisUnavailableError) return { status: 503, error: message };
  const status = (err as { statusCode?: unknown })?.statusCode; // fastify's own (bad request, body too large)
  if (typeof status === 'number' && status >= 400 && status < 500) return { status, error: message };
  return { status: 500, error: message };
}

/** A job id or model name from the path; ids with white space can't exist (keys.ts refuses them). */
function param(req: FastifyRequest, name: string): string {
  const value = (req.params as Record<string, string>)[name] ?? '';
  if (!value || /\s/.test(value)) throw new DashboardHttpError(404, `${JSON.stringify(value)} not found`);
  return value;
}

/** A non-negative integer query parameter, or undefined when absent. */
function intQuery(req: FastifyRequest, name: string): number | undefined {
  const raw = (req.query as Record<string, unknown>)[name];
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string' || !/^\d{1,9}$/.test(raw)) throw new KmfleetInputError(`${name} must be a non-negative integer (got ${JSON.stringify(raw)})`);
  return Number(raw);
}

export const dashboardPlugin: FastifyPluginAsync<DashboardPluginOptions> = async (app: FastifyInstance, opts) => {
  const { client, hosts } = opts;
  const actions = opts.actions ?? false;
  const dir = opts.staticDir ?? findStaticDir();
  // read once: five small files, and a missing one fails at start rather than on a request
  const files = new Map(Object.keys(STATIC_FILES).map((f) => [f, readFileSync(join(dir, f))]));

  app.addHook('onRequest', async (req, reply) => {
    reply.headers(SECURITY_HEADERS);
    if (hosts && !hosts.allows(req.headers.host, req.socket.localPort)) throw hostRefusal(req.headers.host);
  });
  app.setErrorHandler(async (err, req, reply) => {
    const { status, error } = errorAnswer(err);
    if (status >= 500) req.log.error({ err }, 'dashboard request failed');
    return reply.code(status).send({ error });
  });
  app.setNotFoundHandler(async (req, reply) => {
    if (hosts && !hosts.allows(req.headers.host, req.socket.localPort)) throw hostRefusal(req.headers.host);
    return reply.code(404).send({ error: 'not found' });
  });

  const sendFile = (file: string) => async (_req: FastifyRequest, reply: FastifyReply) =>
    reply.type(STATIC_FILES[file]).send(files.get(file));
  if (app.prefix) {
    // /mount → mount/: the page's relative URLs need the trailing slash. Relative, so a proxy's sub-path survives.
    const last = app.prefix.split('/').pop();
    app.get('', { prefixTrailingSlash: 'no-slash' }, async (_req, reply) => reply.redirect(`${last}/`, 308));
  }
  app.get('/', { prefixTrailingSlash: 'slash' }, sendFile('index.html'));
  for (const file of Object.keys(STATIC_FILES)) app.get(`/${file}`, sendFile(file));
  app.get('/favicon.ico', sendFile('favicon.svg')); // what browsers ask for by themselves

  app.get('/api/config', async () => ({ actions: actions ? [...DASHBOARD_ACTIONS] : [] }));
  app.get('/api/queue', async () => queueSnapshot(client));
  app.get('/api/jobs', async (req) => {
    const state = (req.query as Record<string, unknown>).state;
    if (state !== undefined && typeof state !== 'string') throw new KmfleetInputError('state must be given once');
    return jobPage(client, { state: state || undefined, offset: intQuery(req, 'offset'), limit: intQuery(req, 'limit') });
  });
  app.get('/api/jobs/:id', async (req, reply) => {
    const id = param(req, 'id');
    const job = await jobDetail(client, id);
    return job ?? reply.code(404).send({ error: `job ${id} not found` });
  });
  app.get('/api/jobs/:id/iterations', async (req) => jobIterations(client, param(req, 'id')));
  app.get('/api/models/:name/history', async (req) => modelHistory(client, param(req, 'name')));

  for (const action of DASHBOARD_ACTIONS) {
    app.post(`/api/jobs/:id/${action}`, async (req) => {
      if (!actions) throw new DashboardHttpError(403, `${action} is off (start the dashboard with --allow-actions)`);
      if (req.headers['x-kmfleet'] !== action) throw new DashboardHttpError(403, `missing X-Kmfleet: ${action} header`);
      return client[action](param(req, 'id'));
    });
  }
};
