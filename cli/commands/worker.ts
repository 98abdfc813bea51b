/**
 * `kmfleet worker`: run a queue worker in this process until SIGTERM/SIGINT (then hand running jobs back and exit
 * inside the grace period). Configuration is the environment (worker/config.ts has the table); the options below
 * override the most common variables for a quick local run.
 */
import { loadWorkerConfig } from '../../worker/config.js';
import { installShutdownHandlers } from '../../worker/lifecycle.js';
import { startWorker } from '../../worker/worker.js';
import { stopTracing } from '../tracing.js';

interface WorkerOptions {
  /** global options (before the command's name) */
  redisUrl?: string;
  prefix?: string;
  concurrency?: number;
  queue?: string;
  backend?: 'cpu' | 'cuda';
  cacheDir?: string;
}

export async function action(opts: WorkerOptions): Promise<void> {
  const env = { ...process.env };
  if (opts.redisUrl) env.REDIS_URL = opts.redisUrl;
  if (opts.prefix) env.KMFLEET_PREFIX = opts.prefix;
  if (opts.concurrency !== undefined) env.KMFLEET_CONCURRENCY = String(opts.concurrency);
  if (opts.queue) env.KMFLEET_QUEUE = opts.queue;
  if (opts.backend) env.KMFLEET_BACKEND = opts.backend;
  if (opts.cacheDir) env.KMFLEET_CACHE_DIR = opts.cacheDir;
  const config = loadWorkerConfig(env);
  const w = await startWorker(config, { announce: false });
  // the spans still buffered leave before the process does (stopTracing waits 2 s at most, and nothing without tracing)
  const exit = (code: number) => void stopTracing().finally(() => process.exit(code));
  installShutdownHandlers(w, { graceMs: config.shutdownGraceMs, exit });
  w.announce();  // only now: a SIGTERM sent as soon as 'worker started' shows must find the handlers in place
  // Run until a signal: the handlers exit the process.
  await new Promise<never>(() => {});
}
