/**
 * `kmfleet generate`: a seeded synthetic dataset streamed to a .npy file (blobs or normal noise), written to a
 * temporary name and renamed when complete.
 */
import { rename, rm, mkdir } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { generateDataset, type SyntheticKind } from '../../core/index.js';
import { humanCount, ProgressLine } from '../progress.js';

interface GenerateOptions {
  rows: number;
  dims: number;
  centers: number;
  kind: SyntheticKind;
  seed: number;
  dtype: 'f32' | 'f16';
  clusterStd: number;
  out: string;
  json?: boolean;
}

export async function action(o: GenerateOptions): Promise<void> {
  const out = resolve(o.out);
  await mkdir(dirname(out), { recursive: true });
  const tmp = join(dirname(out), `.${basename(out)}.${process.pid}.tmp`);
  const progress = new ProgressLine({ json: o.json, plainEveryMs: 2000 });
  const t0 = Date.now();
  try {
    const r = await generateDataset(tmp, {
      kind: o.kind, rows: o.rows, dims: o.dims, centers: o.centers, seed: o.seed, dtype: o.dtype, clusterStd: o.clusterStd,
      chunkRows: Math.max(1, Math.floor((4 << 20) / (o.dims * 4))),
      onProgress: (done) => progress.update(`generate ${humanCount(done)}/${humanCount(o.rows)} rows`),
    });
    await rename(tmp, out);
    progress.done();
    const result = { path: out, kind: o.kind, rows: o.rows, dims: o.dims, dtype: o.dtype, centers: o.kind === 'blobs' ? o.centers : null, seed: o.seed, bytes: r.bytes, sha256: r.sha256, ms: Date.now() - t0 };
    process.stdout.write(o.json ? JSON.stringify(result) + '\n' : `wrote ${out}: ${o.rows} × ${o.dims} ${o.dtype} (${o.kind}), ${humanCount(r.bytes)}B, sha256 ${r.sha256}\n`);
  } catch (err) {
    progress.done();
    await rm(tmp, { force: true });
    throw err;
  }
}
