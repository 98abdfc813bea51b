/**
 * Rows that are decoded a batch at a time (Parquet row groups, Arrow record batches), not read at byte offsets: a read
 * decodes every batch it touches whole into delivered rows. The last decoded batches are kept, and a decode in flight
 * is shared: a pass reads in row order, so the next read mostly starts in the batch the last one ended in.
 */
import type { DatasetConversion, DatasetDType } from '../formats/npy-header.js';

/** decoded batches kept: the one a pass is in and the one before it */
const KEPT_BATCHES = 2;

/** A column of embeddings read through DecodedBatches: what LocalFileSource and S3RowSource need of it. */
export interface DecodedColumn {
  /** the embedding column's name */
  readonly column: string;
  readonly rows: number;
  readonly dims: number;
  readonly dtype: DatasetDType;
  readonly rowBytes: number;
  readonly convert?: DatasetConversion;
  /** Fills target with rows [firstRow, firstRow+count) (range checked by the caller). */
  read(firstRow: number, count: number, target: Buffer): Promise<void>;
}

export class DecodedBatches {
  private readonly kept = new Map<number, Promise<Buffer>>();

  /**
   * `starts`: the first row of each batch, and the row count after the last (batch b holds rows [starts[b],
   * starts[b+1]); empty batches are allowed); `decode(b)`: batch b as delivered rows, `rowBytes` each.
   */
  constructor(
    private readonly starts: readonly number[],
    private readonly rowBytes: number,
    private readonly decode: (batch: number) => Promise<Buffer>,
  ) {}

  /** Keeps batch b's rows, already decoded (by an open that needed its first row). */
  keep(batch: number, rows: Buffer): void {
    this.kept.set(batch, Promise.resolve(rows));
  }

  async read(firstRow: number, count: number, target: Buffer): Promise<void> {
    const { starts, rowBytes } = this;
    const end = firstRow + count;
    let b = batchIndex(starts, firstRow);
    for (let row = firstRow; row < end; b++) {
      const rows = await this.batch(b);
      const batchEnd = Math.min(starts[b + 1], end);
      rows.copy(target, (row - firstRow) * rowBytes, (row - starts[b]) * rowBytes, (batchEnd - starts[b]) * rowBytes);
      row = batchEnd;
    }
  }

  private batch(b: number): Promise<Buffer> {
    let p = this.kept.get(b);
    if (p) {
      // most recently used last
      this.kept.delete(b);
      this.kept.set(b, p);
      return p;
    }
    p = this.decode(b);
    p.catch(() => this.kept.get(b) === p && this.kept.delete(b));
    this.kept.set(b, p);
    while (this.kept.size > KEPT_BATCHES) this.kept.delete(this.kept.keys().next().value as number);
    return p;
  }
}

/** the batch holding `row`: the last b with starts[b] <= row (so an empty batch before it is passed over) */
function batchIndex(starts: readonly number[], row: number): number {
  let lo = 0;
  let hi = starts.length - 2;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (starts[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
