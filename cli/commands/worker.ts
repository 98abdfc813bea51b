/**
 * `kmfleet worker`: run a queue worker in this process until SIGTERM/SIGINT (then hand running jobs back and exit
 * inside the grace period). Configuration is the environment (worker/config.ts has the table); the options below
 * override the most common variables for a quick local run.
 */
import { type Command } from 'commander';
import { positiveInt } from './fit.js';

interface WorkerOptions {
  concurrency?: number;
  queue?: string;
  backend?: 'cpu' | 'cuda';
  cacheDir?: string;
}

export function registerWorker(program: Command): void {
  program
    .command('worker')
    .description('run a queue worker (REDIS_URL, KMFLEET_S3_*, KMFLEET_*: see worker/config.ts) until SIGTERM')
    .option('--concurrency <n>', 'jobs at once (default: one per GPU, else 1; KMFLEET_CONCURRENCY)', positiveInt('--concurrency'))
    .option('--queue <name>', 'queue name (KMFLEET_QUEUE, default jobs)')
    .option('--backend <b>', 'force cpu or cuda (KMFLEET_BACKEND)')
    .option('--cache-dir <dir>', 'local dataset cache (KMFLEET_CACHE_DIR)')
    .action(async (opts: WorkerOptions) => {
      const env = { ...process.env };
      if (opts.concurrency !== undefined) env.KMFLEET_CONCURRENCY = String(opts.concurrency);
      if (opts.queue) env.KMFLEET_QUEUE = opts.queue;
      if (opts.backend) env.KMFLEET_BACKEND = opts.backend;
      if (opts.cacheDir) env.KMFLEET_CACHE_DIR = opts.cacheDir;
      // loaded here, not at the top: the worker pulls in the native addon, which --help and other commands don't need
      const { loadWorkerConfig } = await import('../../worker/config.js');
      const { installShutdownHandlers } = await import('../../worker/lifecycle.js');
      const { startWorker } = await import('../../worker/worker.js');
      const config = loadWorkerConfig(env);
      const w = await startWorker(config);
      installShutdownHandlers(w, { graceMs: config.shutdownGraceMs });
      // Run until a signal: the handlers exit the process.
      await new Promise<never>(() => {});
    });
}
