/**
 * `kmfleet wait JOBID`: follows a job until it ends. On a terminal, one live line (bar, iteration/maxIter,
 * inertia, reassigned %, ETA); elsewhere plain lines at most once a second. Exit 0 when it completed, 1 when it
 * failed or was cancelled, 3 when Redis could not be used (down longer than the client's grace, refused, password),
 * 4 when the --timeout passed (the job goes on): cli/main.ts.
 */
import type { KmfleetClient } from '../../producer/client.js';
import type { JobProgress } from '../../producer/progress.js';
import type { JobResult } from '../../producer/results.js';
import { ProgressLine } from '../progress.js';
import type { ConnectionFlags } from '../options.js';
import { cliAction, printJson, withClient } from './connection.js';
import { formatDuration, formatProgress, formatResult } from './status.js';

export interface WaitFlags extends ConnectionFlags {
  timeout?: number;
}

export const action = cliAction(async (jobId: string, flags: WaitFlags) => {
  await withClient(flags, async (c) => {
    const result = await followJob(c, jobId, flags);
    if (flags.json) printJson(result);
    else process.stdout.write(`job ${jobId}: completed\n` + formatResult(result));
  });
});

function bar(p: JobProgress, width = 20): string {
  const done = Math.max(0, Math.min(width, Math.round((p.iteration / Math.max(1, p.maxIter)) * width)));
  return `[${'#'.repeat(done)}${'.'.repeat(width - done)}]`;
}

/** Waits for the job with a progress line on stderr (JSON lines with --json); resolves with the result. */
export async function followJob(c: KmfleetClient, jobId: string, flags: WaitFlags): Promise<JobResult> {
  const line = new ProgressLine({ json: flags.json, plainEveryMs: 1000 });
  const started = Date.now();
  if (!flags.json) process.stderr.write(`waiting for job ${jobId}\n`);
  try {
    return await c.wait(jobId, {
      timeoutMs: flags.timeout,
      onProgress: (p, state) => {
        if (state === 'completed' || state === 'failed') return; // the caller reports the end
        // Short enough for an 80-column terminal: the job id was printed when the wait began.
        const text = p && state === 'active'
          ? `${bar(p)} ${formatProgress(p, true)}`
          : `${jobId} ${state}${p ? ` · ${formatProgress(p)}` : ''} · ${formatDuration(Date.now() - started)}`;
        line.update(text, { event: 'progress', jobId, state, ...(p ?? {}) });
      },
    });
  } finally {
    line.done();
  }
}
