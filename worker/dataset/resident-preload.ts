/**
 * Rows handed to the engine while the dataset downloads (native/index.ts loadRows): as the memory cache's blocks fill,
 * their rows below plan.residentRows go to the engine, which keeps them as resident rows without a pass. The first
 * pass then starts its feeds where the held rows end, so it costs like a later pass: the copy into resident memory
 * (and the page faults of a fresh 128 MB) happens during the download, on the core that the download leaves idle, not
 * after it. Results are the same bits (the engine converts a loaded row as the pass would).
 *
 * Blocks download in parallel, so rows arrive out of order: each block's rows go in pieces of at least `minBytes`
 * (the last piece of a block whatever its size), in the order they land. finish() hands over what is in place, stops,
 * waits for the loads and says where the first pass starts (the rows held contiguously from row 0; 0 when nothing
 * could be kept, which is today's first pass). A load that fails (cancelled, out of memory) stops the preload and
 * kept nothing, so the count stays exact; nothing here fails a job.
 */
import type { MemoryCachedRowSource } from './memory-cache.js';

/** What the preload needs of the engine (native/index.ts's Engine satisfies it). */
export interface PreloadEngine {
  readonly loadsRows: boolean;
  readonly plan: { readonly residentRows: number; readonly rowBytes: number };
  loadRows(rows: Uint8Array, firstRow: number, rowCount: number): Promise<number>;
}

export interface ResidentPreloadOptions {
  /** bytes per load, at least (default 2 MiB): fewer engine tasks against a shorter tail after the last byte */
  minBytes?: number;
}

export class ResidentPreload {
  /** per block (by its first row): the end of the rows already handed over */
  private readonly sent = new Map<number, number>();
  private readonly minRows: number;
  private readonly residentRows: number;
  private unsubscribe: (() => void) | undefined;
  /** every load sent, settled (never rejects) */
  private all: Promise<unknown> = Promise.resolve();
  private held = 0;
  private broken = false;
  private stopped = false;
  /** rows handed over (for logs and tests) */
  rowsSent = 0;
  loads = 0;

  private constructor(private readonly engine: PreloadEngine, private readonly cache: MemoryCachedRowSource, minBytes: number) {
    this.residentRows = Math.min(engine.plan.residentRows, cache.rows);
    this.minRows = Math.max(1, Math.floor(minBytes / cache.rowBytes));
  }

  /** A started preload, or undefined when the engine cannot load rows or keeps none resident. */
  static start(engine: PreloadEngine, cache: MemoryCachedRowSource, options: ResidentPreloadOptions = {}): ResidentPreload | undefined {
    if (!engine.loadsRows || engine.plan.residentRows <= 0 || engine.plan.rowBytes !== cache.rowBytes) return undefined;
    const p = new ResidentPreload(engine, cache, options.minBytes ?? 2 << 20);
    p.unsubscribe = cache.onRowsArrived((first, count, done) => p.arrived(first, count, done));
    return p;
  }

  /** Hands over every row in place, stops, and resolves with the rows the engine holds from row 0. */
  async finish(): Promise<number> {
    if (!this.stopped) {
      this.stopped = true;
      this.unsubscribe?.();
      // what landed since the last piece went, remainders too: onRowsArrived reports the rows in place at once
      this.cache.onRowsArrived((first, count) => this.send(first, count, 1))();
    }
    await this.all;
    return this.held;
  }

  /** Stops without waiting (the job ends); the cache's close() waits for the loads in flight. */
  stop(): void {
    this.stopped = true;
    this.unsubscribe?.();
  }

  private arrived(first: number, count: number, blockDone: boolean): void {
    if (this.stopped) return;
    this.send(first, count, blockDone ? 1 : this.minRows);
  }

  private send(blockFirst: number, count: number, atLeast: number): void {
    if (this.broken) return;
    const from = this.sent.get(blockFirst) ?? blockFirst;
    const end = Math.min(blockFirst + count, this.residentRows);
    if (end - from < atLeast || end <= from) return;
    this.sent.set(blockFirst, end);
    const n = end - from;
    this.rowsSent += n;
    this.loads++;
    const load = this.engine.loadRows(this.cache.rowsInPlace(from, n), from, n).then(
      (held) => {
        this.held = held; // loads settle in the order they were sent: the latest is the engine's count
      },
      () => {
        this.broken = true; // kept nothing: `held` stays exact; the first pass feeds the rest
      },
    );
    this.cache.lend(load);
    this.all = Promise.all([this.all, load]);
  }
}
