/**
 * Per-job signals for "this worker lost the job's lock". BullMQ only emits 'lockRenewalFailed' (worker.ts wires it
 * here); a job that kept computing after that would waste the device until its next fenced write failed, so the
 * processor stops it at the next chunk boundary instead, writing nothing.
 */
export class LockLossRegistry {
  private readonly jobs = new Map<string, AbortController>();

  watch(jobId: string): { signal: AbortSignal; dispose: () => void } {
    const ctl = new AbortController();
    this.jobs.set(jobId, ctl);
    return {
      signal: ctl.signal,
      dispose: () => {
        if (this.jobs.get(jobId) === ctl) this.jobs.delete(jobId);
      },
    };
  }

  lost(jobIds: string[]): void {
    for (const id of jobIds) this.jobs.get(id)?.abort(new Error(`lost the lock of job ${id}`));
  }
}
