/**
 * Each iteration's Redis writes (its history stream entry and the job's progress) go out once the engine is busy with
 * the next pass: building and sending them holds the JS thread, and the engine would wait for it between passes. The
 * driver starts the next pass in the microtasks that follow onIteration, so a write queued behind them (setImmediate)
 * runs beside that pass. The writes stay in iteration order with at most one iteration's outstanding, and a failed
 * write stops the run at the next iteration, or before the outputs.
 *
 *   await writes.next(() => Promise.all([appendIteration(...), progress(...)]));   // in onIteration
 *   await writes.flush();                                                         // after the run
 */
export class IterationWrites {
  private last: Promise<unknown> = Promise.resolve();

  /** `defer` runs its callback after the current task (default: setImmediate, behind the pending microtasks) */
  constructor(private readonly defer: (run: () => void) => void = setImmediate) {}

  /** Waits for the previous iteration's writes (throwing their error), then queues `write` for after this task. */
  async next(write: () => Promise<unknown>): Promise<void> {
    await this.last;
    this.last = new Promise<void>((resolve) => this.defer(resolve)).then(write);
    this.last.catch(() => {}); // awaited by the next call or by flush()
  }

  /** Resolves when the writes queued so far are done; rejects with a failed one's error. */
  flush(): Promise<unknown> {
    return this.last;
  }
}
