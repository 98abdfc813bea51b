/**
 * `kmfleet dashboard`'s server: fastify with the dashboard plugin (plugin.ts) at the root, listening on one address.
 * Every request must name this server in its Host header (producer/allowed-hosts.ts), else 421 whatever the path: a
 * page on another site whose name is rebound to 127.0.0.1 (DNS rebinding) is same-origin with us, and would otherwise
 * read every endpoint and, with actions on, cancel or remove jobs. Its requests carry its own name as Host.
 *
 *   const dash = await startDashboard({ client, port: 0 });   // dash.url → http://127.0.0.1:PORT/
 *   await dash.close();                                       // the client stays open (the caller's)
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { hostAllowance } from '../producer/allowed-hosts.js';
import type { KmfleetClient } from '../producer/client.js';
import { dashboardPlugin, errorAnswer, hostRefusal } from './plugin.js';

export interface DashboardOptions {
  client: KmfleetClient;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 8080; 0 = any free port. */
  port?: number;
  /** Serve the job actions (cancel, retry, remove, promote) and show their buttons. Default false. */
  actions?: boolean;
  /** Directory of index.html, app.js, style.css; default: found next to the plugin or in the package. */
  staticDir?: string;
  /**
   * Host names (`name` for any port, `name:port` for one) a reverse proxy forwards requests with, beyond the ones always
   * answered: localhost, 127.0.0.1, [::1] and the address the server is bound to (producer/allowed-hosts.ts).
   */
  allowedHosts?: readonly string[];
}

export interface DashboardServer {
  readonly app: FastifyInstance;
  readonly server: Server;
  /** http://host:port/ */
  readonly url: string;
  close(): Promise<void>;
}

export async function startDashboard(opts: DashboardOptions): Promise<DashboardServer> {
  const host = opts.host ?? '127.0.0.1';
  // a mistyped allowed host fails here, before the port is taken
  const hosts = hostAllowance({ host, allowedHosts: opts.allowedHosts });
  const app = Fastify({ logger: false, forceCloseConnections: true, return503OnClosing: true });
  // requests no route of the plugin answers (another method, a path outside it) get the same Host check
  app.addHook('onRequest', async (req) => {
    if (!hosts.allows(req.headers.host, req.socket.localPort)) throw hostRefusal(req.headers.host);
  });
  app.setErrorHandler(async (err, _req, reply) => {
    const { status, error } = errorAnswer(err);
    return reply.code(status).send({ error });
  });
  await app.register(dashboardPlugin, { client: opts.client, actions: opts.actions, hosts, staticDir: opts.staticDir });
  try {
    await app.listen({ host, port: opts.port ?? 8080 });
  } catch (err) {
    await app.close();
    throw err;
  }
  const { address, family, port } = app.server.address() as AddressInfo;
  const shown = family === 'IPv6' ? `[${address}]` : address;
  return { app, server: app.server, url: `http://${shown}:${port}/`, close: () => app.close() };
}
