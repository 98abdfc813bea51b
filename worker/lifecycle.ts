/**
 * Process lifecycle of a worker pod: SIGTERM (preemption, scale-down, rollout) or SIGINT → stop taking jobs, let the
 * running ones stop at the next chunk boundary, checkpoint and go back to the queue without spending an attempt
 * (processor.ts), close connections, exit 0 — all inside the grace period. Past it, exit 1 anyway: the kubelet would
 * SIGKILL us, and the job then comes back through BullMQ's stalled-job check from its last checkpoint.
 */
import type { KmfleetWorker } from './worker.js';

export interface ShutdownOptions {
  graceMs: number;
  /** default process.exit */
  exit?: (code: number) => void;
  signals?: NodeJS.Signals[];
}

/** Installs the handlers; returns a function that removes them. */
export function installShutdownHandlers(w: KmfleetWorker, opts: ShutdownOptions): () => void {
  const exit = opts.exit ?? ((code: number) => process.exit(code));
  const signals = opts.signals ?? ['SIGTERM', 'SIGINT'];
  let started = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (started) {
      w.logger.warn({ signal }, 'second signal: exiting now');
      exit(1);
      return;
    }
    started = true;
    const deadline = setTimeout(() => {
      w.logger.error({ graceMs: opts.graceMs }, 'shutdown grace period exceeded: exiting; the job resumes from its last checkpoint elsewhere');
      exit(1);
    }, opts.graceMs);
    deadline.unref();
    w.shutdown(signal).then(
      () => {
        clearTimeout(deadline);
        exit(0);
      },
      (err) => {
        w.logger.error({ err }, 'shutdown failed');
        clearTimeout(deadline);
        exit(1);
      },
    );
  };
  for (const s of signals) process.on(s, onSignal);
  return () => {
    for (const s of signals) process.off(s, onSignal);
  };
}
