/**
 * Engines of finished jobs, closed once BullMQ has recorded how the job ended instead of in the processor before it
 * returns. close() frees the engine's host buffers, resident rows and device memory synchronously on the JS thread,
 * milliseconds for a large dataset that the job's completion need not wait for.
 *
 *   processor, finally:   releases.defer(jobId, () => { engine.close(); devices.release(ordinal); })
 *   worker.ts:            'completed' / 'failed' → releases.reported(job.id)
 *   processor, before it opens an engine (and takes a GPU):   releases.releaseAll()
 *   shutdown, after the BullMQ worker closed:                  releases.releaseAll()
 *
 * Two engines never hold one device's memory at once: an engine opens only after every deferred one was closed. A job
 * whose end BullMQ reports with no event (handed back on SIGTERM, its lock lost, a completion write that failed) is
 * released by a timer. Each release runs exactly once.
 */
export interface EngineReleasesOptions {
  /** release a job BullMQ has not reported after this long (default 1 s) */
  fallbackMs?: number;
  /** a release that threw (it never reaches BullMQ's event emitter) */
  onError?: (err: unknown, jobId: string) => void;
}

export class EngineReleases {
  private readonly pending = new Map<string, () => void>();
  private readonly fallbackMs: number;

  constructor(private readonly options: EngineReleasesOptions = {}) {
    this.fallbackMs = options.fallbackMs ?? 1000;
  }

  /** engines waiting to be closed */
  get size(): number {
    return this.pending.size;
  }

  /** Run `release` once: when the job's end is reported, before another engine opens, or after the fallback. */
  defer(jobId: string, release: () => void): void {
    this.run(jobId); // an earlier attempt of the same job still waiting (its event not seen yet)
    const once = () => {
      if (this.pending.get(jobId) !== once) return;
      this.pending.delete(jobId);
      clearTimeout(timer);
      try {
        release();
      } catch (err) {
        this.options.onError?.(err, jobId);
      }
    };
    this.pending.set(jobId, once);
    const timer = setTimeout(once, this.fallbackMs);
    timer.unref();
  }

  /** BullMQ recorded the job as completed or failed. */
  reported(jobId: string | undefined): void {
    if (jobId !== undefined) this.run(jobId);
  }

  releaseAll(): void {
    for (const jobId of [...this.pending.keys()]) this.run(jobId);
  }

  private run(jobId: string): void {
    this.pending.get(jobId)?.();
  }
}
