/**
 * .npz: a zip archive of .npy members (np.savez). A member stored without compression (np.savez's way) is a .npy
 * file lying whole inside the archive, so its rows are read in place, by offset, like a .npy file's: this module finds
 * the member through the zip's central directory (the end-of-central-directory record at the end of the archive,
 * zip64 included, as numpy writes it) and its local header, then parses the member's .npy header. A deflated member
 * (np.savez_compressed) cannot be addressed by row and is refused, saying what to do instead.
 *
 * Reads go through a `readAt` callback, so kmfleet fit (pread) and the worker (ranged GETs) share the parsing. Nothing
 * is allocated sized by numbers read from the file before they are checked against the archive's size and caps.
 */
import { DatasetFormatError } from './errors.js';
import { NPY_HEADER_PROBE_BYTES, npyHeaderLength, parseNpyHeader, type DatasetConversion, type DatasetLayout } from './npy-header.js';

/** Reads `length` bytes at `position` (fewer only past the end of the archive). */
export type ReadAt = (position: number, length: number) => Promise<Uint8Array>;

/** the end-of-central-directory record without its comment, and the most a comment can add */
const EOCD_BYTES = 22;
const MAX_COMMENT_BYTES = 0xffff;
const ZIP64_LOCATOR_BYTES = 20;
const ZIP64_EOCD_BYTES = 56;
/** what a reader fetches from the end of the archive first: the EOCD with the longest comment and the zip64 locator */
export const ZIP_TAIL_PROBE_BYTES = EOCD_BYTES + MAX_COMMENT_BYTES + ZIP64_LOCATOR_BYTES;
/** central directories larger than this are refused (about 150 000 members with short names) */
const MAX_CENTRAL_DIRECTORY_BYTES = 16 << 20;
const LOCAL_HEADER_BYTES = 30;

const SIG_EOCD = 0x06054b50;
const SIG_ZIP64_LOCATOR = 0x07064b50;
const SIG_ZIP64_EOCD = 0x06064b50;
const SIG_CENTRAL = 0x02014b50;
const SIG_LOCAL = 0x04034b50;

interface Member {
  name: string;
  method: number;
  flags: number;
  compressedSize: number;
  size: number;
  localHeaderOffset: number;
}

export interface NpzMemberLayout {
  /** the member's name in the archive, e.g. "arr_0.npy" */
  member: string;
  /** the rows' layout, offsets from the start of the archive */
  layout: DatasetLayout;
}

/**
 * Finds a member of the .npz archive of `fileSize` bytes and returns its rows' layout. `member` names it with or
 * without ".npy"; without one, the archive's only array or else "arr_0" (np.savez's name for its first positional
 * array). `convert` and `dims` mean what they mean for a .npy file.
 */
export async function npzLayout(
  readAt: ReadAt,
  fileSize: number,
  opts: { member?: string; convert?: DatasetConversion; dims?: number } = {},
): Promise<NpzMemberLayout> {
  if (fileSize < EOCD_BYTES) throw new DatasetFormatError(`.npz file of ${fileSize} bytes is too short for a zip archive`);
  const members = await centralDirectory(readAt, fileSize);
  const m = pickMember(members, opts.member);
  if (m.flags & 1) throw new DatasetFormatError(`.npz member ${m.name} is encrypted`);
  if (m.method !== 0) {
    const how = m.method === 8 ? 'deflated (np.savez_compressed)' : `compressed (zip method ${m.method})`;
    throw new DatasetFormatError(
      `.npz member ${m.name} is ${how}: its rows cannot be read in place. Save with np.savez (not np.savez_compressed), ` +
        'or convert it to .npy: np.save("data.npy", np.load("data.npz")["' + m.name.replace(/\.npy$/, '') + '"])',
    );
  }
  if (m.compressedSize !== m.size) throw new DatasetFormatError(`.npz member ${m.name} is stored but its sizes differ (${m.compressedSize} vs ${m.size})`);
  if (m.localHeaderOffset + LOCAL_HEADER_BYTES > fileSize) {
    throw new DatasetFormatError(`.npz member ${m.name}'s local header at ${m.localHeaderOffset} lies past the end of the ${fileSize}-byte archive (truncated?)`);
  }
  const local = Buffer.from(await readAt(m.localHeaderOffset, LOCAL_HEADER_BYTES));
  if (local.length < LOCAL_HEADER_BYTES || local.readUInt32LE(0) !== SIG_LOCAL) {
    throw new DatasetFormatError(`.npz member ${m.name} has no local header at offset ${m.localHeaderOffset} (a damaged archive?)`);
  }
  const start = m.localHeaderOffset + LOCAL_HEADER_BYTES + local.readUInt16LE(26) + local.readUInt16LE(28);
  if (start + m.size > fileSize) {
    throw new DatasetFormatError(
      `.npz member ${m.name} needs bytes [${start}, ${start + m.size}) but the archive has ${fileSize} (truncated?)`,
    );
  }
  let head = await readAt(start, Math.min(m.size, NPY_HEADER_PROBE_BYTES));
  const total = npyHeaderLength(head);
  if (total !== null && total > head.length && total <= m.size) head = await readAt(start, total);
  let layout: DatasetLayout;
  try {
    layout = parseNpyHeader(head, m.size, { convert: opts.convert });
  } catch (err) {
    if (err instanceof DatasetFormatError) throw new DatasetFormatError(`.npz member ${m.name}: ${err.message}`);
    throw err;
  }
  if (opts.dims !== undefined && opts.dims !== layout.dims) {
    throw new DatasetFormatError(`.npz member ${m.name} has ${layout.dims} dims, not the ${opts.dims} given`);
  }
  return { member: m.name, layout: { ...layout, dataOffset: start + layout.dataOffset } };
}

function pickMember(members: Member[], wanted: string | undefined): Member {
  const arrays = members.filter((m) => !m.name.endsWith('/'));
  const names = arrays.map((m) => m.name.replace(/\.npy$/, ''));
  const list = names.length > 20 ? `${names.slice(0, 20).join(', ')}, … (${names.length} in all)` : names.join(', ');
  if (wanted !== undefined) {
    const found = arrays.find((m) => m.name === wanted || m.name === `${wanted}.npy`);
    if (!found) throw new DatasetFormatError(`.npz has no member "${wanted}" (it has: ${list || 'none'})`);
    return found;
  }
  if (arrays.length === 1) return arrays[0];
  const first = arrays.find((m) => m.name === 'arr_0.npy');
  if (first) return first;
  if (arrays.length === 0) throw new DatasetFormatError('.npz archive has no members');
  throw new DatasetFormatError(`.npz has ${arrays.length} arrays and none is arr_0: say which one (dataset.member, kmfleet fit --member): ${list}`);
}

async function centralDirectory(readAt: ReadAt, fileSize: number): Promise<Member[]> {
  const tailStart = Math.max(0, fileSize - ZIP_TAIL_PROBE_BYTES);
  const tail = Buffer.from(await readAt(tailStart, fileSize - tailStart));
  let eocd = -1;
  for (let i = tail.length - EOCD_BYTES; i >= 0; i--) {
    // the comment length must reach the end exactly: a signature inside a comment does not count
    if (tail.readUInt32LE(i) === SIG_EOCD && i + EOCD_BYTES + tail.readUInt16LE(i + 20) === tail.length) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) {
    throw new DatasetFormatError('not a .npz (zip) archive: no end-of-central-directory record at the end of the file (truncated, or another format?)');
  }
  let entries: number = tail.readUInt16LE(eocd + 10);
  let cdSize: number = tail.readUInt32LE(eocd + 12);
  let cdOffset: number = tail.readUInt32LE(eocd + 16);
  const locator = eocd - ZIP64_LOCATOR_BYTES;
  if (locator >= 0 && tail.readUInt32LE(locator) === SIG_ZIP64_LOCATOR) {
    const at = safe(tail.readBigUInt64LE(locator + 8), 'zip64 end record offset');
    if (at + ZIP64_EOCD_BYTES > fileSize) throw new DatasetFormatError(`.npz zip64 end record at ${at} lies past the end of the ${fileSize}-byte archive`);
    const z = Buffer.from(await readAt(at, ZIP64_EOCD_BYTES));
    if (z.length < ZIP64_EOCD_BYTES || z.readUInt32LE(0) !== SIG_ZIP64_EOCD) throw new DatasetFormatError(`.npz has no zip64 end record at offset ${at} (a damaged archive?)`);
    entries = safe(z.readBigUInt64LE(32), 'member count');
    cdSize = safe(z.readBigUInt64LE(40), 'central directory size');
    cdOffset = safe(z.readBigUInt64LE(48), 'central directory offset');
  }
  if (cdSize > MAX_CENTRAL_DIRECTORY_BYTES) throw new DatasetFormatError(`.npz central directory of ${cdSize} bytes exceeds the ${MAX_CENTRAL_DIRECTORY_BYTES}-byte limit`);
  if (cdOffset + cdSize > fileSize) {
    throw new DatasetFormatError(`.npz central directory [${cdOffset}, ${cdOffset + cdSize}) lies past the end of the ${fileSize}-byte archive (truncated?)`);
  }
  const cd = Buffer.from(await readAt(cdOffset, cdSize));
  const members: Member[] = [];
  let p = 0;
  for (let i = 0; i < entries; i++) {
    if (p + 46 > cd.length || cd.readUInt32LE(p) !== SIG_CENTRAL) throw new DatasetFormatError(`.npz central directory entry ${i} is damaged`);
    const nameLen = cd.readUInt16LE(p + 28);
    const extraLen = cd.readUInt16LE(p + 30);
    const commentLen = cd.readUInt16LE(p + 32);
    if (p + 46 + nameLen + extraLen + commentLen > cd.length) throw new DatasetFormatError(`.npz central directory entry ${i} is damaged`);
    const m: Member = {
      name: cd.toString('utf8', p + 46, p + 46 + nameLen),
      flags: cd.readUInt16LE(p + 8),
      method: cd.readUInt16LE(p + 10),
      compressedSize: cd.readUInt32LE(p + 20),
      size: cd.readUInt32LE(p + 24),
      localHeaderOffset: cd.readUInt32LE(p + 42),
    };
    zip64Extra(m, cd.subarray(p + 46 + nameLen, p + 46 + nameLen + extraLen));
    members.push(m);
    p += 46 + nameLen + extraLen + commentLen;
  }
  return members;
}

/** Sizes and offsets too large for 32 bits are 0xffffffff in the entry and 64-bit in its zip64 extra field, in order. */
function zip64Extra(m: Member, extra: Buffer): void {
  const FULL = 0xffffffff;
  if (m.size !== FULL && m.compressedSize !== FULL && m.localHeaderOffset !== FULL) return;
  for (let q = 0; q + 4 <= extra.length; ) {
    const id = extra.readUInt16LE(q);
    const len = extra.readUInt16LE(q + 2);
    if (id === 0x0001) {
      let r = q + 4;
      const next = (what: string) => {
        if (r + 8 > q + 4 + len) throw new DatasetFormatError(`.npz member ${m.name}'s zip64 field lacks its ${what}`);
        const v = safe(extra.readBigUInt64LE(r), what);
        r += 8;
        return v;
      };
      if (m.size === FULL) m.size = next('size');
      if (m.compressedSize === FULL) m.compressedSize = next('compressed size');
      if (m.localHeaderOffset === FULL) m.localHeaderOffset = next('offset');
      return;
    }
    q += 4 + len;
  }
  throw new DatasetFormatError(`.npz member ${m.name} needs a zip64 field that it lacks`);
}

function safe(v: bigint, what: string): number {
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new DatasetFormatError(`.npz ${what} ${v} is not a byte count`);
  return Number(v);
}
