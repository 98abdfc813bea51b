import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeNpy } from '../../core/formats/npy-encode.js';
import { NpyWriter } from '../../core/formats/npy-writer.js';
import { S3MultipartSink } from '../../worker/outputs/multipart-sink.js';
import { OutputWriter } from '../../worker/outputs/writer.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';

describe('outputs: multipart sink and the output writer', () => {
  let s3: S3ServerHandle;
  beforeAll(async () => {
    s3 = await startS3Server({ buckets: ['out'] });
  });
  afterAll(async () => {
    await s3?.stop();
  });

  it('streams a 13 MB int32 array through multipart parts sent as Buffers, checksummed', async () => {
    const rows = 3_300_000;
    const labels = new Int32Array(rows).map((_, i) => (i * 7919) % 1000);
    const sink = new S3MultipartSink(s3.handle, { bucket: 'out', key: 'big/assignments.npy' }, { partBytes: 5 * 1024 * 1024, concurrency: 2 });
    const w = new NpyWriter(sink, '<i4', [rows]);
    for (let r = 0; r < rows; r += 1_000_000) await w.write(labels.subarray(r, Math.min(rows, r + 1_000_000)));
    const res = await w.close();
    const stored = await s3.get('out', 'big/assignments.npy');
    expect(stored.length).toBe(res.bytes);
    expect(createHash('sha256').update(stored).digest('hex')).toBe(res.sha256);
    const back = decodeNpy(stored);
    expect(back.shape).toEqual([rows]);
    expect(Buffer.from((back.data as Int32Array).buffer, (back.data as Int32Array).byteOffset, rows * 4).equals(Buffer.from(labels.buffer))).toBe(true);
  });

  it('an aborted upload leaves no object (s3rver answers 405 to the abort; tolerated under its switch)', async () => {
    const sink = new S3MultipartSink(s3.handle, { bucket: 'out', key: 'aborted/assignments.npy' }, { partBytes: 5 * 1024 * 1024 });
    await sink.write(Buffer.alloc(11 * 1024 * 1024, 3));
    await sink.abort();
    expect(sink.abortError).toBeUndefined();
    expect(s3.keys('out', 'aborted/')).toEqual([]);
    await expect(sink.write(Buffer.alloc(1))).rejects.toThrow(/aborted/);
  });

  it('writes centroids and assignments, refuses when fenced, and discards uncommitted files', async () => {
    let owner = true;
    const fence = async () => {
      if (!owner) throw new Error('fenced');
    };
    const w = new OutputWriter({ s3: s3.handle, output: 's3://out/runs', jobId: 'j1', fence });
    const c = new Float32Array([1, 2, 3, 4, 5, 6]);
    const cf = await w.writeCentroids(c, 2, 3);
    expect(cf.uri).toBe('s3://out/runs/j1/centroids.npy');
    const af = await w.writeRows('assignments.npy', '<i4', 10, (f, n) => new Int32Array(n).fill(f % 2), 3);
    expect(af.bytes).toBe(128 + 40);
    expect(s3.keys('out', 'runs/j1/')).toEqual(['runs/j1/assignments.npy', 'runs/j1/centroids.npy']);
    owner = false;
    await expect(w.commit({ ok: true })).rejects.toThrow('fenced');
    await w.discard();
    expect(s3.keys('out', 'runs/j1/')).toEqual([]);

    owner = true;
    const w2 = new OutputWriter({ s3: s3.handle, output: 's3://out/runs', jobId: 'j2', fence });
    await w2.writeCentroids(c, 2, 3);
    await w2.commit({ files: w2.files });
    await w2.discard();
    expect(s3.keys('out', 'runs/j2/')).toEqual(['runs/j2/centroids.npy', 'runs/j2/summary.json']);
    expect(JSON.parse((await s3.get('out', 'runs/j2/summary.json')).toString()).files['centroids.npy'].sha256).toMatch(/^[0-9a-f]{64}$/);
  });
});
