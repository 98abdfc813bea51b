/**
 * Checkpoints written while the next iteration computes, at most one in flight (on GPU workers, whose CPU is free
 * while the device computes): a save's latency (S3 PUT + fenced Redis record) is hidden behind compute, and its failure — FencedError above all — still stops the run, at the next
 * iteration boundary, when the next save (or flush) awaits it. A crash loses at most the one save in flight: the job
 * then resumes one iteration earlier, with the same bitwise result.
 */
import { encodeCheckpoint, type KmeansCheckpoint } from '../../core/index.js';
import { checkpointSpan } from '../tracing.js';
import type { CheckpointStore } from './store.js';

export class BackgroundCheckpointSaver {
  private pending: Promise<void> | undefined;
  /** iteration of the newest checkpoint known to be saved */
  lastSaved = 0;
  /** ms spent in saves in total (overlapping compute) */
  saveMs = 0;
  /** ms the run waited for a save to finish */
  waitMs = 0;
  saves = 0;

  constructor(
    private readonly store: CheckpointStore,
    private readonly specHash: string,
    private readonly datasetEtag: string,
    private readonly onSaved?: (ms: number) => void,
  ) {}

  /**
   * Start saving `cp` once the previous save is done (its error, if any, is thrown here). With `overlap` false the
   * save completes before this returns: right when compute saturates the CPU (the cpu backend), where a save running
   * beside it only steals cores from the engine's threads and delays the whole pass.
   */
  async submit(cp: KmeansCheckpoint, overlap = true): Promise<void> {
    await this.flush();
    const p = this.save(cp);
    p.catch(() => {}); // awaited by the next submit/flush; never an unhandled rejection meanwhile
    this.pending = p;
    if (!overlap) await this.flush();
  }

  /** Wait for the save in flight; throws its error. */
  async flush(): Promise<void> {
    if (!this.pending) return;
    const p = this.pending;
    const t = performance.now();
    try {
      await p;
    } finally {
      this.waitMs += performance.now() - t;
      if (this.pending === p) this.pending = undefined;
    }
  }

  /** Save now (after the one in flight), unless a checkpoint at least as new is already saved. */
  async saveNow(cp: KmeansCheckpoint): Promise<void> {
    await this.flush().catch(() => {});
    if (cp.iteration > this.lastSaved) await this.save(cp);
  }

  private async save(cp: KmeansCheckpoint): Promise<void> {
    const t = performance.now();
    await checkpointSpan(cp.iteration, () => this.store.save(cp.iteration, encodeCheckpoint(cp), this.specHash, this.datasetEtag));
    this.lastSaved = Math.max(this.lastSaved, cp.iteration);
    const ms = performance.now() - t;
    this.saveMs += ms;
    this.saves++;
    this.onSaved?.(ms);
  }
}
