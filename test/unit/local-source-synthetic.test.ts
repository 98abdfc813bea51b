import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { generateDataset } from '../../core/dataset/synthetic.js';
import { decodeNpy } from '../../core/formats/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-syn-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('generateDataset', () => {
  it('is deterministic by seed, streams in chunks, and hashes what it wrote', async () => {
    const a = await generateDataset(join(dir, 'a.npy'), { kind: 'blobs', rows: 5000, dims: 6, centers: 4, seed: 3, chunkRows: 777 });
    const b = await generateDataset(join(dir, 'b.npy'), { kind: 'blobs', rows: 5000, dims: 6, centers: 4, seed: 3, chunkRows: 4096 });
    const c = await generateDataset(join(dir, 'c.npy'), { kind: 'blobs', rows: 5000, dims: 6, centers: 4, seed: 4 });
    expect(a.sha256).toBe(b.sha256); // chunking does not change the bytes
    expect(a.sha256).not.toBe(c.sha256);
    expect(a.sha256).toBe(createHash('sha256').update(readFileSync(a.path)).digest('hex'));
    const src = await LocalFileSource.open(a.path);
    expect([src.rows, src.dims, src.dtype]).toEqual([5000, 6, 'f32']);
    await src.close();
  });

  it('blobs: every row lies near one of the centers (std 1)', async () => {
    const r = await generateDataset(join(dir, 'blobs.npy'), { kind: 'blobs', rows: 2000, dims: 8, centers: 5, seed: 11 });
    const x = decodeNpy(readFileSync(r.path)).data as Float32Array;
    const centers = r.centers!;
    const hits = new Array(5).fill(0);
    for (let i = 0; i < 2000; i++) {
      let best = Infinity;
      let arg = -1;
      for (let c = 0; c < 5; c++) {
        let d = 0;
        for (let j = 0; j < 8; j++) d += (x[i * 8 + j] - centers[c * 8 + j]) ** 2;
        if (d < best) { best = d; arg = c; }
      }
      expect(best).toBeLessThan(8 * 9); // squared distance of 8 N(0,1) values: mean 8, far below 72
      hits[arg]++;
    }
    for (const h of hits) expect(h).toBeGreaterThan(250); // centers drawn uniformly
  });

  it('normal: mean ≈ 0 and variance ≈ 1; f16 output halves the size', async () => {
    const r = await generateDataset(join(dir, 'n.npy'), { kind: 'normal', rows: 4000, dims: 10, seed: 1 });
    const x = decodeNpy(readFileSync(r.path)).data as Float32Array;
    const mean = x.reduce((s, v) => s + v, 0) / x.length;
    const variance = x.reduce((s, v) => s + (v - mean) ** 2, 0) / x.length;
    expect(Math.abs(mean)).toBeLessThan(0.03);
    expect(Math.abs(variance - 1)).toBeLessThan(0.05);
    const h = await generateDataset(join(dir, 'n16.npy'), { kind: 'normal', rows: 4000, dims: 10, seed: 1, dtype: 'f16' });
    const src = await LocalFileSource.open(h.path);
    expect(src.dtype).toBe('f16');
    await src.close();
    const x16 = decodeNpy(readFileSync(h.path)).data as Float32Array;
    for (let i = 0; i < 100; i++) expect(Math.abs(x16[i] - x[i])).toBeLessThanOrEqual(Math.abs(x[i]) * 2 ** -11 + 2 ** -24);
  });

  it('refuses bad options', async () => {
    await expect(generateDataset(join(dir, 'bad.npy'), { kind: 'blobs', rows: 0, dims: 3 })).rejects.toThrow(/rows/);
    await expect(generateDataset(join(dir, 'bad.npy'), { kind: 'blobs', rows: 3, dims: 3, centers: 0 })).rejects.toThrow(/centers/);
  });
});
