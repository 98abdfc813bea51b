/**
 * One pass of the engine over the dataset: fill the engine's host buffers from the source and feed them in row order,
 * with up to plan.buffers buffers busy at once, so that reading chunk i+1 overlaps computing chunk i.
 *
 * Buffer b cycles: wait until its previous feed resolved (the engine may reuse it only then) → read rows into it →
 * wait until the previous chunk's feed was *issued* (feeds must come in row order) → feed.
 * The rows the engine holds (its resident rows, then its host tier's: PassResult.heldRows) are fed only until it holds
 * them; each later pass starts its feeds where they end. The first pass starts at options.firstRow when rows were
 * loaded into the engine ahead of it (resident-preload.ts). Rows past the tiers' planned rows that lie in a local file
 * (RowSource.fileRows) the engine reads itself (engine.feedFile): its threads and page-locked pieces reach the page
 * cache's speed, where reads into a chunk-sized buffer here cost the host's memory three crossings a byte.
 */
import type { PassChain, PassMode, PassResult } from '../../native/index.js';
import type { RowSource } from '../dataset/row-source.js';
import type { KmeansEngine } from './types.js';

/** per engine, the rows it held from row 0 after its last completed pass: where the next pass's feeds start */
const held = new WeakMap<object, number>();

export interface PassOptions {
  distances?: boolean;
  /** false: the engine skips the data's variance (PassResult.dataVariance NaN); the caller has it already */
  dataVariance?: boolean;
  /** adds the milliseconds spent in source.read */
  readTime?: { ms: number };
  /**
   * The engine's first pass only: where its feeds start — the rows the engine holds from row 0 after engine.loadRows
   * (it processes those itself). Later passes start at the held rows' end whatever this says.
   */
  firstRow?: number;
  /**
   * Called right after beginPass, before any feed: work queued on the engine here (engine.readCentroids) runs ahead of
   * the pass's feeds and finish, while the device processes the resident rows.
   */
  onBegin?: () => void;
  /** fit passes: the stopping rule, so that the engine may begin the next pass itself (BeginPassOptions.chain) */
  chain?: PassChain;
}

export async function runPass(engine: KmeansEngine, source: RowSource, mode: PassMode, options: PassOptions = {}): Promise<PassResult> {
  const { chunkRows, buffers, residentRows, hostRows, rowBytes } = engine.plan;
  if (rowBytes !== source.rowBytes) {
    throw new Error(`engine rows are ${rowBytes} bytes but the source's are ${source.rowBytes}`);
  }
  const start = Math.min(held.get(engine) ?? Math.min(options.firstRow ?? 0, residentRows), source.rows);
  const nBuffers = Math.max(1, buffers);
  // firstRow: the engine starts on the rows it holds right away
  engine.beginPass(mode, {
    distances: options.distances ?? false, dataVariance: options.dataVariance ?? true, firstRow: start, chain: options.chain,
  });
  options.onBegin?.();

  // per buffer, the latest chunk that used it; these promises never reject (the first error is kept in `error`)
  const inFlight: Promise<void>[] = Array.from({ length: nBuffers }, () => Promise.resolve());
  let error: { reason: unknown } | undefined;
  let previousIssued: Promise<void> = Promise.resolve();

  let chunk = 0;
  for (let first = start; first < source.rows; first += chunkRows, chunk++) {
    const b = chunk % nBuffers;
    const count = Math.min(chunkRows, source.rows - first);
    await inFlight[b];
    if (error) break;
    const inFile = engine.feedFile && first >= residentRows + hostRows ? source.fileRows?.(first, count) : undefined;
    const prev = previousIssued;
    let markIssued!: () => void;
    previousIssued = new Promise<void>((r) => (markIssued = r));
    inFlight[b] = (async () => {
      try {
        let fed: Promise<void>;
        if (inFile) {
          await prev;
          if (error) return;
          fed = engine.feedFile!(inFile.fd, inFile.offset, first, count);
        } else {
          const target = engine.buffer(b);
          const t0 = performance.now();
          await source.read(first, count, target);
          if (options.readTime) options.readTime.ms += performance.now() - t0;
          await prev;
          if (error) return;
          fed = engine.feed(b, first, count);
        }
        markIssued();
        await fed;
      } catch (reason) {
        if (!error) {
          error = { reason };
          engine.cancel(); // feeds already queued in the engine reject at the next chunk boundary
        }
      } finally {
        markIssued();
      }
    })();
  }
  await Promise.all(inFlight);
  if (error) {
    try { await engine.finishPass(); } catch { /* the pass was cancelled */ }
    throw error.reason;
  }
  const result = await engine.finishPass();
  held.set(engine, result.heldRows);
  return result;
}
