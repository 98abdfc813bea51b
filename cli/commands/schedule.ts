/**
 * `kmfleet schedule NAME (--cron EXPR [--tz TZ] | --every MS) <spec flags>`: a recurring job (created or
 * replaced). Scheduled runs warm-start from the model's previous result: --init defaults to `previous` and
 * --name to NAME. `kmfleet schedules` lists them.
 */
import type { Command } from 'commander';
import type { ScheduleInfo } from '../../producer/schedule.js';
import { addConnectionOptions, cliAction, printJson, withClient, type ConnectionFlags } from './connection.js';
import { addSpecOptions, specFromFlags, type SpecFlags } from './enqueue.js';
import { formatDuration } from './status.js';

interface ScheduleFlags extends SpecFlags, ConnectionFlags {
  cron?: string;
  every?: string;
  tz?: string;
  limit?: string;
  priority?: string;
}

const toNumber = (v: string | undefined) => (v === undefined ? undefined : /^\d+$/.test(v.trim()) ? Number(v) : (v as unknown as number));

export function registerSchedule(program: Command): void {
  const cmd = program
    .command('schedule')
    .description('create or replace a recurring job (each run warm-starts from the previous result)')
    .argument('<name>', 'schedule name (also the default model name)')
    .option('--cron <expr>', 'cron pattern, 5 fields (6 with seconds), e.g. "0 3 * * *"')
    .option('--tz <zone>', 'IANA time zone for --cron, e.g. Europe/Berlin (default UTC)')
    .option('--every <ms>', 'run every this many ms instead of a cron pattern')
    .option('--limit <n>', 'stop after this many runs')
    .option('--priority <n>', '1 (highest) .. 2097152');
  addSpecOptions(cmd, 'previous');
  addConnectionOptions(cmd).action(
    cliAction(async (name: string, flags: ScheduleFlags) => {
      const spec = await specFromFlags(flags);
      await withClient(flags, async (c) => {
        const info = await c.schedule(
          name,
          { cron: flags.cron, every: toNumber(flags.every), tz: flags.tz, limit: toNumber(flags.limit) },
          spec,
          { priority: toNumber(flags.priority) },
        );
        if (flags.json) printJson(info);
        else process.stdout.write(`scheduled ${formatSchedule(info)}\n`);
      });
    }),
  );

  addConnectionOptions(program.command('schedules').description('list the recurring jobs')).action(
    cliAction(async (flags: ConnectionFlags) => {
      const list = await withClient(flags, (c) => c.schedules());
      if (flags.json) printJson(list);
      else if (list.length === 0) process.stdout.write('no schedules\n');
      else process.stdout.write(list.map(formatSchedule).join('\n') + '\n');
    }),
  );
}

export function formatSchedule(s: ScheduleInfo): string {
  const when = s.cron ? `cron "${s.cron}"${s.tz ? ` ${s.tz}` : ''}` : `every ${formatDuration(s.every ?? 0)}`;
  const next = s.next ? `next ${new Date(s.next).toISOString()}` : 'no next run';
  const what = s.spec ? `k=${s.spec.k} init=${s.spec.init} ${s.spec.dataset.uri} → ${s.spec.output}` : '';
  return `${s.name}: ${when}, ${next}${s.iterationCount ? `, ${s.iterationCount} runs so far` : ''}${what ? `\n  ${what}` : ''}`;
}
