/**
 * What every queue command of the CLI shares: where Redis is (--redis-url, else REDIS_URL), which prefix and
 * queue (--prefix / KMFLEET_PREFIX, --queue / KMFLEET_QUEUE), a client that is always closed, and the mapping
 * of the SDK's input errors to the CLI's exit code 2.
 */
import type { Command } from 'commander';
import type { KmfleetClient } from '../../producer/client.js';
import { KmfleetInputError } from '../../producer/errors/kmfleet-error.js';
import { DEFAULT_PREFIX, DEFAULT_QUEUE } from '../../producer/keys.js';

export interface ConnectionFlags {
  redisUrl?: string;
  prefix?: string;
  queue?: string;
  json?: boolean;
}

/** --redis-url, --prefix, --queue and --json, on a queue command. */
export function addConnectionOptions(cmd: Command): Command {
  return cmd
    .option('--redis-url <url>', 'redis:// or rediss:// URL (default: $REDIS_URL, else redis://127.0.0.1:6379)')
    .option('--prefix <prefix>', `Redis key prefix (default: $KMFLEET_PREFIX, else ${DEFAULT_PREFIX})`)
    .option('--queue <name>', `queue name (default: $KMFLEET_QUEUE, else ${DEFAULT_QUEUE})`)
    .option('--json', 'machine-readable output: one JSON document on stdout');
}

/** A client from the flags and the environment; closed when `fn` settles. */
export async function withClient<T>(flags: ConnectionFlags, fn: (client: KmfleetClient) => Promise<T>): Promise<T> {
  // Loaded here, not at the top: BullMQ + zod cost ~0.3 s of start-up that `kmfleet fit` or `--help` need not pay.
  const { KmfleetClient } = await import('../../producer/client.js');
  const client = new KmfleetClient({
    connection: flags.redisUrl ?? process.env.REDIS_URL ?? undefined,
    prefix: flags.prefix ?? (process.env.KMFLEET_PREFIX || undefined),
    queue: flags.queue ?? (process.env.KMFLEET_QUEUE || undefined),
    connectTimeoutMs: Number(process.env.KMFLEET_REDIS_CONNECT_TIMEOUT_MS) || 5000,
  });
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

/**
 * Wraps an action: the SDK's input errors (bad spec, bad job id, bad REDIS_URL...) leave as `UsageError`,
 * which cli/main.ts maps to exit code 2; everything else keeps its name (exit 1).
 */
export function cliAction<A extends unknown[]>(fn: (...args: A) => Promise<void>): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await fn(...args);
    } catch (err) {
      if (err instanceof KmfleetInputError) {
        const usage = new Error(err.message, { cause: err });
        usage.name = 'UsageError';
        throw usage;
      }
      throw err;
    }
  };
}

/** An error that cli/main.ts reports with exit code 1 (a failure, not bad input). */
export class CommandFailure extends Error {
  override name = 'CommandFailure';
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value) + '\n');
}
