/**
 * `kmfleet dashboard`: a small web page to watch the queue (counts, recent jobs, schedules) and each job's
 * progress and convergence curve, served by producer/dashboard/server.ts until SIGINT/SIGTERM.
 */
import type { Command } from 'commander';
import { addConnectionOptions, cliAction, withClient, type ConnectionFlags } from './connection.js';

interface DashboardFlags extends ConnectionFlags {
  port: string;
  host: string;
  allowCancel?: boolean;
}

export function registerDashboard(program: Command): void {
  addConnectionOptions(
    program
      .command('dashboard')
      .description('serve a web dashboard of the queue, job progress and convergence curves')
      .option('--port <n>', 'HTTP port', '8080')
      .option('--host <addr>', 'address to listen on (0.0.0.0 to expose it: there is no login)', '127.0.0.1')
      .option('--allow-cancel', 'show a cancel button on unfinished jobs'),
  ).action(
    cliAction(async (flags: DashboardFlags) => {
      const port = Number(flags.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) {
        throw Object.assign(new Error(`--port must be 0..65535 (got ${flags.port})`), { name: 'UsageError' });
      }
      await withClient(flags, async (client) => {
        await client.connect(); // a down Redis is one clear error now, not an empty page later
        const { startDashboard } = await import('../../producer/dashboard/server.js');
        const dash = await startDashboard({ client, host: flags.host, port, allowCancel: Boolean(flags.allowCancel) });
        process.stderr.write(`kmfleet dashboard: ${dash.url} (Redis ${client.where}${flags.allowCancel ? ', cancel on' : ''})\n`);
        await new Promise<void>((resolve) => {
          const stop = () => resolve();
          process.once('SIGINT', stop);
          process.once('SIGTERM', stop);
        });
        await dash.close();
      });
    }),
  );
}
