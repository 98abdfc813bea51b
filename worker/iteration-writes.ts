/**
 * Each iteration's Redis writes (its history stream entry and the job's progress) go out once the engine is busy with
 * the next pass. Building and sending them took ~0.3–0.5 ms of the JS thread per iteration while the engine waited
 * between passes (bench/pipeline: 20 iterations a job); the driver starts the next pass in the microtasks that follow
 * onIteration, so a write queued behind them (setImmediate) runs beside that pass. The writes stay in iteration order
 * with at most one iteration's outstanding, and a failed write stops the run at the next iteration, or before the
 * outputs, as when they were chained in line.
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
