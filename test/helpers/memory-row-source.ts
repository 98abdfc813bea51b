/**
 * A dataset in memory with the URI and ETag a cache names its file after (worker/dataset/cache.ts CacheableSource):
 * for tests of the caches, where the directory is under test and S3 is not (test/integration/s3-source.test.ts runs
 * the caches against s3rver). Values name their dataset and position; reads are counted and may be slowed down.
 */
import type { CacheableSource } from '../../worker/dataset/cache.js';

export class MemoryRowSource implements CacheableSource {
  readonly dtype = 'f32' as const;
  readonly rowBytes: number;
  reads = 0;
  readonly bytes: Buffer;
  constructor(readonly uri: string, readonly rows: number, readonly dims = 4, readonly etag = '"e1"', private readonly delayMs = 0) {
    this.rowBytes = dims * 4;
    const a = new Float32Array(rows * dims);
    for (let i = 0; i < a.length; i++) a[i] = uri.length * 1000 + i;
    this.bytes = Buffer.from(a.buffer);
  }
  describe() { return this.uri; }
  async read(first: number, count: number, target: Buffer) {
    this.reads++;
    if (this.delayMs > 0) await new Promise((r) => setTimeout(r, this.delayMs));
    this.bytes.copy(target, 0, first * this.rowBytes, (first + count) * this.rowBytes);
  }
  async close() {}
}
