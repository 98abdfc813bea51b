/** `kmfleet history NAME [--limit N]`: results of a named model, newest first. */
import { KmfleetInputError } from '../../errors/index.js';
import type { ConnectionFlags } from '../options.js';
import { cliAction, printJson, withClient } from './connection.js';
import { formatDuration } from './status.js';

interface HistoryFlags extends ConnectionFlags {
  limit?: string;
}

export const action = cliAction(async (name: string, flags: HistoryFlags) => {
  const limit = flags.limit === undefined ? 20 : Number(flags.limit);
  if (!Number.isSafeInteger(limit) || limit < 1) {
    throw new KmfleetInputError(`--limit must be a positive integer (got ${flags.limit})`);
  }
  const results = await withClient(flags, (c) => c.history(name, { limit }));
  if (flags.json) return printJson(results);
  if (results.length === 0) return void process.stdout.write(`no results for model ${name}\n`);
  const rows = results.map((r) =>
    [new Date(r.finishedAt).toISOString(), r.jobId, `k=${r.k}`, `iter=${r.iterations}`, r.converged ? r.stopReason : 'maxIter',
      `inertia=${r.inertia.toPrecision(6)}`, formatDuration(r.timings.totalMs), r.outputs.centroids].join('  '),
  );
  process.stdout.write(rows.join('\n') + '\n');
});
