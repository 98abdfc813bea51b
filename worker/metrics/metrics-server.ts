/**
 * A tiny HTTP server (node:http, no framework) for Prometheus and the kubelet:
 *   GET /metrics   the registry in Prometheus text format
 *   GET /healthz   200 while `healthy()` is true (liveness: the process is not wedged), else 503
 *   GET /readyz    200 while `ready()` is true (readiness: connected, not draining), else 503
 * HEAD works on each. A check that throws or rejects answers 503, never crashes the server.
 * Kept separate from the worker's event loop work: a scrape does one Redis call at most (queue depth).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

export const METRICS_PATH = '/metrics';
export const HEALTH_PATH = '/healthz';
export const READY_PATH = '/readyz';
/** The port every manifest, compose file and doc uses unless configured otherwise. */
export const DEFAULT_METRICS_PORT = 9464;

type Check = () => boolean | Promise<boolean>;

export interface MetricsServerOptions {
  /** 0 picks a free port (tests). */
  port: number;
  /** Default '0.0.0.0' (the kubelet and Prometheus connect from outside the pod). */
  host?: string;
  registry: Registry;
  ready: Check;
  healthy: Check;
}

export interface MetricsServer {
  readonly port: number;
  /** http://host:port, with 127.0.0.1 when bound to all interfaces. */
  readonly url: string;
  close(): Promise<void>;
}

async function passes(check: Check): Promise<boolean> {
  try {
    return (await check()) === true;
  } catch {
    return false;
  }
}

export async function startMetricsServer(opts: MetricsServerOptions): Promise<MetricsServer> {
  const host = opts.host ?? '0.0.0.0';

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
      return;
    }
    const send = (status: number, contentType: string, body: string) => {
      res.writeHead(status, { 'content-type': contentType, 'cache-control': 'no-store' });
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    switch (path) {
      case METRICS_PATH:
        try {
          send(200, opts.registry.contentType, await opts.registry.metrics());
        } catch (e) {
          send(500, 'text/plain', `metrics collection failed: ${(e as Error).message}\n`);
        }
        return;
      case HEALTH_PATH:
        if (await passes(opts.healthy)) send(200, 'text/plain', 'ok\n');
        else send(503, 'text/plain', 'unhealthy\n');
        return;
      case READY_PATH:
        if (await passes(opts.ready)) send(200, 'text/plain', 'ready\n');
        else send(503, 'text/plain', 'not ready\n');
        return;
      default:
        send(404, 'text/plain', 'not found\n');
    }
  };

  const server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  // Probes and scrapes are short: don't let a slow client hold a socket forever.
  server.requestTimeout = 10_000;
  server.keepAliveTimeout = 5_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const urlHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  return {
    port,
    url: `http://${urlHost}:${port}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
}
