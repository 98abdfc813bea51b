/**
 * The HTTP API for producers in any language (`kmfleet api`): fastify serving the routes of api/routes.ts over the
 * producer SDK. Each request passes, in order: the Host check (421), the bearer token (401, when the server has one),
 * the route's schemas (400 naming every bad field), the SDK call; each answer is shaped by its schema.
 *
 *   const api = await startApi({ client, token, port: 0 });   // api.url → http://127.0.0.1:PORT
 *   await api.close();                                          // the client stays open (the caller's)
 *
 * Only JSON bodies are parsed: a browser can send a cross-site POST without a CORS preflight only as text/plain or a
 * form, which get 415; no CORS headers are ever sent.
 */
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { KmfleetInputError } from '../errors/index.js';
import { hostAllowance } from '../producer/allowed-hosts.js';
import type { KmfleetClient } from '../producer/client.js';
import type { S3Handle } from '../worker/s3/client.js';
import { HttpError, requestError, toErrorAnswer } from './errors.js';
import { makeHandlers } from './handlers.js';
import { streamJobEvents } from './job-events.js';
import { DEFAULT_API_HOST, DEFAULT_API_PORT, isLoopbackAddress } from './listen.js';
import { buildOpenApi } from './openapi.js';
import { fastifyPath, ROUTES, type RouteDef, type SchemaName } from './routes.js';
import { serverSchemas } from './schemas.js';
import { bearerMatches, TOKEN_ENV, TOKEN_FILE_ENV } from './token.js';

export interface ApiOptions {
  /** The SDK client the API calls (not closed by close()). */
  client: KmfleetClient;
  /** Default 127.0.0.1. Any non-loopback address needs a token. */
  host?: string;
  /** Default 8090; 0 = any free port. */
  port?: number;
  /** Bearer token every route but /healthz and /openapi.json requires; undefined = none (loopback only). */
  token?: string;
  /**
   * Host header names served besides the loopback names and `host`: `name` (any port) or `name:port`, the names clients
   * use (a DNS name, an IP); producer/allowed-hosts.ts.
   */
  allowedHosts?: readonly string[];
  /** S3 client that signs output URLs; without it /v1/jobs/{id}/outputs answers 503. */
  s3?: S3Handle;
  /** Request and error log; default none. */
  logger?: Logger;
}

export interface ApiServer {
  readonly app: FastifyInstance;
  /** http://host:port (the bound port) */
  readonly url: string;
  close(): Promise<void>;
}

/** A setting of the API server that cannot be used (exit code 2 in the CLI). */
export class ApiConfigError extends KmfleetInputError {
  override readonly code = 'API_CONFIG';
}

const BODY_LIMIT = 256 * 1024;
const SECURITY_HEADERS = { 'X-Content-Type-Options': 'nosniff', 'Cache-Control': 'no-store' };

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: boolean;
  }
}

export async function startApi(opts: ApiOptions): Promise<ApiServer> {
  const app = buildApi(opts);
  try {
    await app.listen({ host: opts.host ?? DEFAULT_API_HOST, port: opts.port ?? DEFAULT_API_PORT });
  } catch (err) {
    await app.close();
    throw err;
  }
  const addr = app.server.address() as AddressInfo;
  const shown = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return { app, url: `http://${shown}:${addr.port}`, close: () => app.close() };
}

/** The fastify instance with every route and check, not yet listening (app.inject() works on it). */
export function buildApi(opts: ApiOptions): FastifyInstance {
  const host = opts.host ?? DEFAULT_API_HOST;
  if (!opts.token && !isLoopbackAddress(host)) {
    throw new ApiConfigError(
      `refusing to listen on ${host} without a token: set ${TOKEN_ENV} or ${TOKEN_FILE_ENV} (or listen on 127.0.0.1)`,
    );
  }
  const allowance = hostAllowance({ host, allowedHosts: opts.allowedHosts });
  let openapi: unknown;
  const handlers = makeHandlers({ client: opts.client, s3: opts.s3, openapi: () => (openapi ??= buildOpenApi()) });
  const app = Fastify({
    ...(opts.logger ? { loggerInstance: opts.logger as FastifyBaseLogger } : { logger: false }),
    bodyLimit: BODY_LIMIT,
    // SSE and long-poll connections must not hold close() up
    forceCloseConnections: true,
    return503OnClosing: true,
  });

  // fastify parses text/plain by default; only JSON is an API body (see the header: cross-site simple requests)
  app.removeContentTypeParser('text/plain');

  app.addHook('onRequest', async (req, reply) => {
    reply.headers(SECURITY_HEADERS);
    if (!allowance.allows(req.headers.host, req.socket.localPort)) {
      throw new HttpError(421, `Host ${JSON.stringify(req.headers.host ?? '')} is not served here (start kmfleet api with --allowed-host NAME)`);
    }
    if (opts.token && req.routeOptions.config.auth && !bearerMatches(req.headers.authorization, opts.token)) {
      reply.header('WWW-Authenticate', 'Bearer');
      throw new HttpError(401, 'missing or wrong bearer token (Authorization: Bearer <token>)');
    }
  });

  app.setErrorHandler(async (err, req, reply) => {
    const answer = toErrorAnswer(err);
    if (answer.internal) req.log.error({ err }, 'request failed');
    return reply.code(answer.status).send(answer.body);
  });
  app.setNotFoundHandler(async (req, reply) => {
    if (!allowance.allows(req.headers.host, req.socket.localPort)) return reply.code(421).send({ error: 'Host is not served here' });
    return reply.code(404).send({ error: `no route ${req.method} ${req.url.split('?')[0]}` });
  });

  for (const route of ROUTES) {
    app.route({
      method: route.method,
      url: fastifyPath(route.path),
      config: { auth: route.auth },
      handler: async (req, reply) => {
        const params = parsePart(route.params, req.params, 'path');
        const query = parsePart(route.query, req.query ?? {}, 'query');
        const body = parsePart(route.body, req.body, 'body');
        const gone = clientGone(reply);
        if (route.operationId === 'jobEvents') {
          // 404 as JSON before the stream starts; afterwards the stream carries the outcome
          if (!(await opts.client.get(params.id))) throw new HttpError(404, `job ${params.id} not found`);
          reply.hijack();
          await streamJobEvents(opts.client, params.id, reply.raw, gone, SECURITY_HEADERS, {
            progress: (p) => serverSchemas.JobProgress.nullable().parse(p),
            result: (r) => serverSchemas.JobResult.parse(r),
          });
          return;
        }
        const out = await handlers[route.operationId]({ params, query, body, signal: gone });
        reply.code(out.status);
        if (out.body === undefined) return reply.send();
        return reply.send(shape(route, out.status, out.body));
      },
    });
  }
  return app;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the parsed value of whichever schema the route names
function parsePart(name: SchemaName | undefined, value: unknown, part: 'body' | 'query' | 'path'): any {
  if (!name) return undefined;
  const result = (serverSchemas[name] as z.ZodType).safeParse(value ?? (part === 'body' ? undefined : {}));
  if (!result.success) throw requestError(part, result.error);
  return result.data;
}

/** The answer through its documented schema: the client gets exactly the documented fields. */
function shape(route: RouteDef, status: number, body: unknown): unknown {
  const name = route.responses[status]?.schema;
  return name ? (serverSchemas[name] as z.ZodType).parse(body) : body;
}

/** Aborts when the client closes the connection before the answer is complete. */
function clientGone(reply: FastifyReply): AbortSignal {
  const ctl = new AbortController();
  // 'close' of the response: after the answer was sent, or when the connection went first
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) ctl.abort();
  });
  return ctl.signal;
}
