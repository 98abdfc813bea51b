/**
 * `kmfleet schedule NAME (--cron EXPR [--tz TZ] | --every DURATION) <spec flags>`: a recurring job (created or
 * replaced). Scheduled runs warm-start from the model's previous result: --init defaults to `previous` and
 * --name to NAME. `kmfleet schedules` lists them.
 */
import type { ScheduleInfo } from '../../producer/schedule.js';
import type { ConnectionFlags, SpecFlags } from '../options.js';
import { cliAction, printJson, withClient } from './connection.js';
import { specFromFlags } from './enqueue.js';
import { formatDuration } from './status.js';

interface ScheduleFlags extends SpecFlags, ConnectionFlags {
  cron?: string;
  every?: string;
  tz?: string;
  limit?: string;
  priority?: string;
}

const toNumber = (v: string | undefined) => (v === undefined ? undefined : /^\d+$/.test(v.trim()) ? Number(v) : (v as unknown as number));

export const action = cliAction(async (name: string, flags: ScheduleFlags) => {
  const spec = await specFromFlags(flags);
  await withClient(flags, async (c) => {
    const info = await c.schedule(
      name,
      { cron: flags.cron, every: flags.every, tz: flags.tz, limit: toNumber(flags.limit) },
      spec,
      { priority: toNumber(flags.priority) },
    );
    if (flags.json) printJson(info);
    else process.stdout.write(`scheduled ${formatSchedule(info)}\n`);
  });
});

export function formatSchedule(s: ScheduleInfo): string {
  const when = s.cron ? `cron "${s.cron}"${s.tz ? ` ${s.tz}` : ''}` : `every ${formatDuration(s.every ?? 0)}`;
  const next = s.next ? `next ${new Date(s.next).toISOString()}` : 'no next run';
  const what = s.spec ? `k=${s.spec.k} init=${s.spec.init} ${s.spec.dataset.uri} → ${s.spec.output}` : '';
  return `${s.name}: ${when}, ${next}${s.iterationCount ? `, ${s.iterationCount} runs so far` : ''}${what ? `\n  ${what}` : ''}`;
}
