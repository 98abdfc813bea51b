/**
 * fvecs, bvecs and .npz through LocalFileSource: the rows delivered are bitwise the rows of the same data as .npy, for
 * any range; bad files fail at open (or, for a record of other dims in the middle, at the read of that record) with a
 * DatasetFormatError naming the problem. The .npz files are numpy's own (np.savez / np.savez_compressed, run with
 * /usr/bin/python3), fvecs/bvecs are written by hand (test/helpers/vecs.ts).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LocalFileSource } from '../../core/dataset/local-file-source.js';
import { DatasetFormatError, encodeNpy } from '../../core/formats/index.js';
import { encodeBvecs, encodeFvecs } from '../helpers/vecs.js';

const dir = mkdtempSync(join(tmpdir(), 'kmfleet-formats-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ROWS = 301;
const DIMS = 7;
const values = Float32Array.from({ length: ROWS * DIMS }, (_, i) => Math.sin(i) * 1e3 + i / 7);

async function readRows(src: LocalFileSource, first: number, count: number): Promise<Buffer> {
  const out = Buffer.alloc(count * src.rowBytes);
  await src.read(first, count, out);
  return out;
}

/** rows [first, first+count) of a float32 array as bytes */
const slice = (v: Float32Array, first: number, count: number) => Buffer.from(v.buffer, v.byteOffset + first * DIMS * 4, count * DIMS * 4);

const ranges = [[0, ROWS], [0, 1], [ROWS - 1, 1], [13, 200]] as const;

async function expectFormatError(p: Promise<unknown>, message: RegExp): Promise<void> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(DatasetFormatError);
  expect((err as Error).message).toMatch(message);
}

describe('fvecs and bvecs', () => {
  it('fvecs: bitwise the rows of the same .npy, for any range, format told by the extension', async () => {
    const path = join(dir, 'a.fvecs');
    writeFileSync(path, encodeFvecs(values, DIMS));
    const src = await LocalFileSource.open(path);
    expect({ rows: src.rows, dims: src.dims, dtype: src.dtype, rowBytes: src.rowBytes, format: src.format }).toEqual({ rows: ROWS, dims: DIMS, dtype: 'f32', rowBytes: 28, format: 'fvecs' });
    expect(src.describe()).toContain('fvecs');
    for (const [f, c] of ranges) expect((await readRows(src, f, c)).equals(slice(values, f, c)), `${f}+${c}`).toBe(true);
    await src.close();
  });

  it('bvecs: uint8 values delivered as float32', async () => {
    const bytes = Uint8Array.from({ length: ROWS * DIMS }, (_, i) => (i * 37) & 0xff);
    const path = join(dir, 'a.bvecs');
    writeFileSync(path, encodeBvecs(bytes, DIMS));
    const src = await LocalFileSource.open(path, { dims: DIMS });
    expect({ rows: src.rows, dims: src.dims, dtype: src.dtype }).toEqual({ rows: ROWS, dims: DIMS, dtype: 'f32' });
    const asF32 = Float32Array.from(bytes);
    for (const [f, c] of ranges) expect((await readRows(src, f, c)).equals(slice(asF32, f, c)), `${f}+${c}`).toBe(true);
    await src.close();
  });

  it('refuses a truncated file, a bad first dim count, other dims than given, and names a record of other dims', async () => {
    const good = encodeFvecs(values, DIMS);
    const at = (name: string, bytes: Buffer) => (writeFileSync(join(dir, name), bytes), join(dir, name));
    await expectFormatError(LocalFileSource.open(at('t.fvecs', good.subarray(0, good.length - 3))),
      /fvecs file of 9629 bytes is not a whole number of 7-dim records \(32 bytes each: 300 records and 29 bytes left over/);
    await expectFormatError(LocalFileSource.open(at('e.fvecs', Buffer.alloc(0))), /fvecs file is empty/);
    await expectFormatError(LocalFileSource.open(at('s.fvecs', Buffer.from([1, 0]))), /too short for a record's 4-byte dim count/);
    const zero = Buffer.from(good);
    zero.writeInt32LE(0, 0);
    await expectFormatError(LocalFileSource.open(at('z.fvecs', zero)), /record 0 declares 0 dims/);
    const huge = Buffer.from(good);
    huge.writeInt32LE(1 << 28, 0);
    await expectFormatError(LocalFileSource.open(at('h.fvecs', huge)), /record 0 declares 268435456 dims .* only 9632 bytes/);
    // a .npy given as fvecs: its magic read as a dim count
    await expectFormatError(LocalFileSource.open(at('npy.fvecs', encodeNpy(values, [ROWS, DIMS]))), /declares -?\d+ dims/);
    await expectFormatError(LocalFileSource.open(at('d.fvecs', good), { dims: 8 }), /fvecs records have 7 dims, not the 8 given/);
    const mixed = Buffer.from(good);
    mixed.writeInt32LE(6, 150 * 32);
    const src = await LocalFileSource.open(at('m.fvecs', mixed));
    await expect(readRows(src, 0, 100)).resolves.toBeDefined();
    await expectFormatError(readRows(src, 100, 100), /fvecs record 150 declares 6 dims, not the 7 of record 0/);
    await src.close();
  });
});

describe('.npz', () => {
  const py = (code: string) => execFileSync('/usr/bin/python3', ['-c', `import numpy as np, sys\nd = sys.argv[1]\nx = np.load(d + "/x.npy")\n${code}`, dir]);
  writeFileSync(join(dir, 'x.npy'), encodeNpy(values, [ROWS, DIMS]));

  it('reads a stored member in place: the only array, arr_0 by default, or the one named; float64 with convert', async () => {
    py([
      'np.savez(d + "/one.npz", x)',
      'np.savez(d + "/named.npz", emb=x, labels=np.arange(len(x)))',
      'np.savez(d + "/two.npz", x, np.zeros((3, 2), np.float32))',
      'np.savez(d + "/f64.npz", emb=x.astype(np.float64))',
    ].join('\n'));
    const read = async (file: string, opts = {}) => {
      const src = await LocalFileSource.open(join(dir, file), opts);
      expect({ rows: src.rows, dims: src.dims, dtype: src.dtype, format: src.format }).toEqual({ rows: ROWS, dims: DIMS, dtype: 'f32', format: 'npz' });
      for (const [f, c] of ranges) expect((await readRows(src, f, c)).equals(slice(values, f, c)), `${file} ${f}+${c}`).toBe(true);
      await src.close();
      return src;
    };
    expect((await read('one.npz')).member).toBe('arr_0.npy');
    expect((await read('two.npz')).member).toBe('arr_0.npy');
    expect((await read('named.npz', { member: 'emb' })).describe()).toContain('npz emb.npy <f4');
    expect((await read('named.npz', { member: 'emb.npy' })).member).toBe('emb.npy');
    expect((await read('f64.npz', { convert: 'f64-to-f32' })).convert).toBe('f64-to-f32');
  });

  it('refuses a compressed member, a missing one, an ambiguous default, a wrong dtype or shape, and a truncated archive', async () => {
    py([
      'np.savez_compressed(d + "/c.npz", x)',
      'np.savez(d + "/named.npz", emb=x, labels=np.arange(len(x)))',
      'np.savez(d + "/f64.npz", emb=x.astype(np.float64))',
      'np.savez(d + "/flat.npz", x.ravel())',
    ].join('\n'));
    const open = (file: string, opts = {}) => LocalFileSource.open(join(dir, file), opts);
    await expectFormatError(open('c.npz'), /member arr_0\.npy is deflated \(np\.savez_compressed\).* np\.savez \(not np\.savez_compressed\)/);
    await expectFormatError(open('named.npz', { member: 'vectors' }), /\.npz has no member "vectors" \(it has: emb, labels\)/);
    await expectFormatError(open('named.npz'), /\.npz has 2 arrays and none is arr_0: say which one .*: emb, labels/);
    await expectFormatError(open('named.npz', { member: 'labels' }), /\.npz member labels\.npy: dtype '<i8' is not supported/);
    await expectFormatError(open('f64.npz'), /\.npz member emb\.npy: dtype '<f8' is not supported .*f64-to-f32/);
    await expectFormatError(open('flat.npz'), /\.npz member arr_0\.npy: dataset must be a 2-D array/);
    await expectFormatError(open('named.npz', { member: 'emb', dims: 3 }), /emb\.npy has 7 dims, not the 3 given/);
    const whole = readFileSync(join(dir, 'named.npz'));
    writeFileSync(join(dir, 'cut.npz'), whole.subarray(0, whole.length - 30));
    await expectFormatError(open('cut.npz'), /no end-of-central-directory record .*truncated/);
    writeFileSync(join(dir, 'npy.npz'), readFileSync(join(dir, 'x.npy')));
    await expectFormatError(open('npy.npz'), /not a \.npz \(zip\) archive/);
  });
});

/**
 * A stored zip written by hand: with `zip64`, every size and offset is 0xffffffff in the entries and given in zip64
 * extra fields, with a zip64 end record and locator — the layout of archives past 4 GiB, which a test cannot afford.
 */
function storedZip(members: { name: string; data: Buffer }[], opts: { zip64?: boolean; comment?: string } = {}): Buffer {
  const FULL = 0xffffffff;
  const parts: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const m of members) {
    const name = Buffer.from(m.name);
    const extra = opts.zip64 ? Buffer.alloc(20) : Buffer.alloc(0);
    if (opts.zip64) {
      extra.writeUInt16LE(1, 0);
      extra.writeUInt16LE(16, 2);
      extra.writeBigUInt64LE(BigInt(m.data.length), 4);
      extra.writeBigUInt64LE(BigInt(m.data.length), 12);
    }
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt32LE(opts.zip64 ? FULL : m.data.length, 18);
    local.writeUInt32LE(opts.zip64 ? FULL : m.data.length, 22);
    local.writeUInt16LE(name.length, 26);
    local.writeUInt16LE(extra.length, 28);
    const cextra = opts.zip64 ? Buffer.alloc(28) : Buffer.alloc(0);
    if (opts.zip64) {
      cextra.writeUInt16LE(1, 0);
      cextra.writeUInt16LE(24, 2);
      cextra.writeBigUInt64LE(BigInt(m.data.length), 4);
      cextra.writeBigUInt64LE(BigInt(m.data.length), 12);
      cextra.writeBigUInt64LE(BigInt(offset), 20);
    }
    const c = Buffer.alloc(46);
    c.writeUInt32LE(0x02014b50, 0);
    c.writeUInt32LE(opts.zip64 ? FULL : m.data.length, 20);
    c.writeUInt32LE(opts.zip64 ? FULL : m.data.length, 24);
    c.writeUInt16LE(name.length, 28);
    c.writeUInt16LE(cextra.length, 30);
    c.writeUInt32LE(opts.zip64 ? FULL : offset, 42);
    central.push(c, name, cextra);
    parts.push(local, name, extra, m.data);
    offset += local.length + name.length + extra.length + m.data.length;
  }
  const cd = Buffer.concat(central);
  const tail: Buffer[] = [cd];
  if (opts.zip64) {
    const z = Buffer.alloc(56);
    z.writeUInt32LE(0x06064b50, 0);
    z.writeBigUInt64LE(44n, 4);
    z.writeBigUInt64LE(BigInt(members.length), 24);
    z.writeBigUInt64LE(BigInt(members.length), 32);
    z.writeBigUInt64LE(BigInt(cd.length), 40);
    z.writeBigUInt64LE(BigInt(offset), 48);
    const loc = Buffer.alloc(20);
    loc.writeUInt32LE(0x07064b50, 0);
    loc.writeBigUInt64LE(BigInt(offset + cd.length), 8);
    loc.writeUInt32LE(1, 16);
    tail.push(z, loc);
  }
  const comment = Buffer.from(opts.comment ?? '', 'latin1');
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(opts.zip64 ? 0xffff : members.length, 8);
  end.writeUInt16LE(opts.zip64 ? 0xffff : members.length, 10);
  end.writeUInt32LE(opts.zip64 ? FULL : cd.length, 12);
  end.writeUInt32LE(opts.zip64 ? FULL : offset, 16);
  end.writeUInt16LE(comment.length, 20);
  return Buffer.concat([...parts, ...tail, end, comment]);
}

describe('.npz archives written by hand', () => {
  const npy = encodeNpy(values, [ROWS, DIMS]);
  const other = encodeNpy(Float32Array.from([1, 2, 3, 4]), [2, 2]);

  it('finds a member through zip64 fields and past an archive comment that holds an end-record signature', async () => {
    const fakeEnd = Buffer.from([0x50, 0x4b, 0x05, 0x06]).toString('latin1');
    for (const [name, opts] of [['z64.npz', { zip64: true }], ['comment.npz', { comment: `made by hand ${fakeEnd} here` }]] as const) {
      writeFileSync(join(dir, name), storedZip([{ name: 'small.npy', data: other }, { name: 'emb.npy', data: npy }], opts));
      const src = await LocalFileSource.open(join(dir, name), { member: 'emb' });
      expect({ rows: src.rows, dims: src.dims }, name).toEqual({ rows: ROWS, dims: DIMS });
      for (const [f, c] of ranges) expect((await readRows(src, f, c)).equals(slice(values, f, c)), `${name} ${f}+${c}`).toBe(true);
      await src.close();
    }
  });

  it('refuses a member whose data runs past the end of the archive', async () => {
    const whole = storedZip([{ name: 'arr_0.npy', data: npy }]);
    // the directory says the member is longer than the bytes before it: as if the archive lost data in the middle
    const cut = Buffer.concat([whole.subarray(0, 200), whole.subarray(whole.length - 22 - 46 - 9)]);
    cut.writeUInt32LE(200, cut.length - 22 + 16); // the central directory now starts at 200
    writeFileSync(join(dir, 'lost.npz'), cut);
    await expectFormatError(LocalFileSource.open(join(dir, 'lost.npz')), /member arr_0\.npy needs bytes \[39, \d+\) but the archive has \d+ \(truncated\?\)/);
  });
});
