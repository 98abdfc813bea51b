/**
 * `kmfleet cancel JOBID`: works from any machine. A job that has not started is removed; a running one is
 * signalled through Redis and its worker stops at the next chunk boundary (failed, reason "cancelled", no
 * retry, no outputs). With --wait, returns once the job has actually stopped.
 */
import { isCancelledReason } from '../../producer/cancel.js';
import { WaitTimeoutError } from '../../producer/errors/index.js';
import type { ConnectionFlags } from '../options.js';
import { cliAction, CommandFailure, printJson, withClient } from './connection.js';

interface CancelFlags extends ConnectionFlags {
  wait?: boolean;
  timeout?: number;
}

export const action = cliAction(async (jobId: string, flags: CancelFlags) => {
  await withClient(flags, async (c) => {
    const res = await c.cancel(jobId);
    let finalState: string | null = res.state;
    if (res.outcome === 'signalled' && flags.wait) {
      const deadline = Date.now() + (flags.timeout ?? 60_000);
      for (;;) {
        const info = await c.get(jobId);
        finalState = info?.state ?? 'removed';
        if (!info || info.state === 'failed' || info.state === 'completed') break;
        if (Date.now() > deadline) throw new WaitTimeoutError(jobId, flags.timeout ?? 60_000, info.state); // exit 4, as `wait`
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    if (flags.json) {
      printJson({ ...res, ...(flags.wait ? { finalState } : {}) });
      if (res.outcome === 'not-found') process.exitCode = 1;
      return;
    }
    switch (res.outcome) {
      case 'not-found':
        throw new CommandFailure(`job ${jobId} not found (never enqueued, removed, or expired)`);
      case 'already-finished':
        process.stdout.write(`job ${jobId} already ${res.state}; nothing to cancel\n`);
        return;
      case 'committed':
        process.stdout.write(`job ${jobId} is already committing its outputs; it completes and was not cancelled\n`);
        return;
      case 'removed':
        process.stdout.write(`job ${jobId} cancelled (removed from the queue before it started)\n`);
        return;
      case 'signalled':
        if (flags.wait) {
          const info = await c.get(jobId);
          const how = info?.state === 'failed' && isCancelledReason(info.failedReason) ? 'stopped' : `ended ${finalState}`;
          process.stdout.write(`job ${jobId} cancelled (${how})\n`);
        } else if (res.state === 'active') {
          process.stdout.write(`job ${jobId} cancel requested; its worker stops at the next chunk boundary\n`);
        } else {
          // a schedule's upcoming run (BullMQ won't remove it), or a job a worker took a moment ago
          process.stdout.write(`job ${jobId} cancel requested; it ends as cancelled as soon as a worker takes it\n`);
        }
    }
  });
});
