/**
 * `kmfleet dashboard`: a small web page to watch the queue (counts, recent jobs, schedules) and each job's
 * progress and convergence curve, served by producer/dashboard/server.ts until SIGINT/SIGTERM.
 */
import type { ConnectionFlags } from '../options.js';
import { cliAction, withClient } from './connection.js';

interface DashboardFlags extends ConnectionFlags {
  port: string;
  host: string;
  allowedHost?: string[];
  allowCancel?: boolean;
}

export const action = cliAction(async (flags: DashboardFlags) => {
  const port = Number(flags.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw Object.assign(new Error(`--port must be 0..65535 (got ${flags.port})`), { name: 'UsageError' });
  }
  await withClient(flags, async (client) => {
    await client.connect(); // a down Redis is one clear error now, not an empty page later
    const { startDashboard } = await import('../../producer/dashboard/server.js');
    const dash = await startDashboard({ client, host: flags.host, port, allowCancel: Boolean(flags.allowCancel), allowedHosts: flags.allowedHost });
    process.stderr.write(`kmfleet dashboard: ${dash.url} (Redis ${client.where}${flags.allowCancel ? ', cancel on' : ''})\n`);
    await new Promise<void>((resolve) => {
      const stop = () => resolve();
      process.once('SIGINT', stop);
      process.once('SIGTERM', stop);
    });
    await dash.close();
  });
});
