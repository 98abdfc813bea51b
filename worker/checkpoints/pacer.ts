/**
 * Which iterations get a checkpoint. The spec's `checkpointEvery` says how many iterations apart they may be; the
 * worker's KMFLEET_CHECKPOINT_MIN_INTERVAL_MS says how much time must have passed since the last one (or since the job
 * started, for the first). Both must hold.
 *
 * Why a time floor: a checkpoint costs about the same whatever the iteration (an S3 PUT of 2·K·D floats and a fenced
 * Redis write: milliseconds against a local S3, tens of ms against a remote one), so on fast iterations "every
 * iteration" would spend a good part of the run on checkpoints. What a crash loses is
 * bounded by time, not by iterations: at most the interval plus one iteration, small next to the lock expiry
 * (KMFLEET_LOCK_DURATION_MS, 30 s) that a killed worker's job waits out before another worker resumes it. Slow
 * iterations (large jobs: seconds each) are longer than the floor, so they keep one checkpoint per `checkpointEvery`.
 * Preemption (SIGTERM) checkpoints regardless of the pacer.
 */
export class CheckpointPacer {
  private last: number;

  constructor(
    /** spec.checkpointEvery; 0 = no periodic checkpoints */
    private readonly every: number,
    /** at least this many ms between two checkpoints; 0 = every `every` iterations */
    private readonly minIntervalMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.last = now();
  }

  /** After iteration `iteration`: write a checkpoint now? A true answer starts the next interval. */
  take(iteration: number): boolean {
    if (this.every <= 0 || iteration % this.every !== 0) return false;
    const t = this.now();
    if (t - this.last < this.minIntervalMs) return false;
    this.last = t;
    return true;
  }
}
