/**
 * `kmfleet generate`: a seeded synthetic dataset streamed to a .npy file (blobs or normal noise), written to a
 * temporary name and renamed when complete.
 */
import { rename, rm, mkdir } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { generateDataset, type SyntheticKind } from '../../worker/dataset/synthetic.js';
import { humanCount, ProgressLine } from '../progress.js';
import { nonNegativeInt, positiveInt } from './fit.js';

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

export function registerGenerate(program: Command): void {
  program
    .command('generate')
    .description('write a seeded synthetic dataset (.npy), streamed: gaussian blobs around random centers, or N(0, 1) noise')
    .requiredOption('--rows <n>', 'rows', positiveInt('--rows'))
    .requiredOption('--dims <d>', 'dimensions', positiveInt('--dims'))
    .option('--centers <c>', 'blob centers', positiveInt('--centers'), 8)
    .addOption(new Option('--kind <kind>', 'distribution').choices(['blobs', 'normal']).default('blobs'))
    .option('--seed <s>', 'seed', nonNegativeInt('--seed'), 0)
    .addOption(new Option('--dtype <t>', 'element type').choices(['f32', 'f16']).default('f32'))
    .option('--cluster-std <x>', 'blob standard deviation', (v: string) => {
      const n = Number(v);
      if (!(n >= 0) || !Number.isFinite(n)) throw new InvalidArgumentError('--cluster-std must be a number ≥ 0');
      return n;
    }, 1)
    .requiredOption('--out <file.npy>', 'output file')
    .option('--json', 'print the result as one JSON object')
    .action(async (o: GenerateOptions) => {
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
    });
}
