/**
 * The decoders of compressed Arrow IPC buffers (Message.fbs, BodyCompression: each buffer of a compressed batch is its
 * uncompressed length as an int64 — -1 for a buffer stored as it is — then the codec's bytes), handed to flechette
 * before a compressed batch is decoded. Both are pure JavaScript and loaded only when a compressed batch is met:
 * fzstd decodes ZSTD frames; lz4js decodes LZ4 blocks, and the LZ4 frame around them is read here, because lz4js's
 * own frame reader trusts each block's size (a damaged one spins for a minute) and drops output past its buffer
 * unseen. A buffer that does not decode, or decodes to another length than its prefix gives, is a DatasetFormatError;
 * the caller names the batch.
 */
import type { ArrowCodec } from './arrow-ipc-framing.js';
import { DatasetFormatError } from './errors.js';

type Decode = (bytes: Uint8Array, length: number) => Uint8Array;

const decoders = new Map<ArrowCodec, Promise<Decode>>();

/** Registers the decoders of `codecs` with flechette (its registry is per process: set before each decode, it holds ours). */
export async function useArrowCodecs(codecs: readonly ArrowCodec[]): Promise<void> {
  const { CompressionType, setCompressionCodec } = await import('@uwdata/flechette');
  for (const codec of codecs) {
    let decoder = decoders.get(codec);
    if (!decoder) {
      decoder = loadDecoder(codec).catch((err: unknown) => {
        decoders.delete(codec);
        throw err;
      });
      decoders.set(codec, decoder);
    }
    const decode = checked(codec, await decoder);
    setCompressionCodec(CompressionType[codec], {
      decode,
      encode: () => {
        throw new Error('kmfleet reads Arrow IPC; it writes none');
      },
    });
  }
}

async function loadDecoder(codec: ArrowCodec): Promise<Decode> {
  if (codec === 'ZSTD') {
    const { decompress } = await import('fzstd');
    // without an output buffer fzstd sizes its own and returns what it decoded, so a short or long result shows
    return (bytes) => decompress(bytes);
  }
  const { decompressBlock } = await import('lz4js');
  return (bytes, length) => decodeLz4Frames(decompressBlock, bytes, length);
}

/**
 * Twice the most a codec's bytes can grow, plus a frame's headers: an LZ4 match adds at most 255 bytes a byte of
 * its length; a ZSTD RLE block holds up to 128 KiB in 4 bytes. A larger length prefix is damage, refused before an
 * output of that size is allocated.
 */
const MAX_GROWTH: Record<ArrowCodec, number> = { LZ4_FRAME: 2 * 255, ZSTD: 2 * 32 * 1024 };
const FRAME_ALLOWANCE = 1024;

/** `decode` with its input's length prefix and its result checked, and the result 8-byte aligned for typed views. */
function checked(codec: ArrowCodec, decode: Decode): Decode {
  return (bytes, length) => {
    if (!Number.isSafeInteger(length) || length < 0) {
      throw new DatasetFormatError(`a buffer compressed with ${codec} gives ${length} as its uncompressed length (a damaged file?)`);
    }
    if (length > bytes.length * MAX_GROWTH[codec] + FRAME_ALLOWANCE) {
      throw new DatasetFormatError(`a buffer of ${bytes.length} bytes compressed with ${codec} gives ${length} as its uncompressed length, more than ${codec} can grow (a damaged file?)`);
    }
    let out: Uint8Array;
    try {
      out = decode(bytes, length);
    } catch (err) {
      if (err instanceof DatasetFormatError) throw err;
      throw new DatasetFormatError(`a buffer compressed with ${codec} (${bytes.length} bytes) does not decode (${(err as Error).message}): a damaged file?`);
    }
    if (out.length !== length) {
      throw new DatasetFormatError(`a buffer compressed with ${codec} decodes to ${out.length} bytes, not the ${length} its length prefix gives (a damaged file?)`);
    }
    return out.byteOffset % 8 === 0 ? out : out.slice();
  };
}

const LZ4_FRAME_MAGIC = 0x184d2204;
/** skippable frames: magic 0x184D2A50..5F, then a length and that many bytes */
const LZ4_SKIPPABLE_MAGIC = 0x184d2a50;
/** the frame descriptor's block maximum size, by its id (4..7) */
const LZ4_BLOCK_MAX: Record<number, number> = { 4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20 };
const FLG_DICT_ID = 0x01;
const FLG_CONTENT_CHECKSUM = 0x04;
const FLG_CONTENT_SIZE = 0x08;
const FLG_BLOCK_CHECKSUM = 0x10;
const BLOCK_UNCOMPRESSED = 0x80000000;

type DecompressBlock = (src: Uint8Array, dst: Uint8Array, sIndex: number, sLength: number, dIndex: number) => number;

/**
 * The LZ4 frames (lz4's frame format, one or more after each other) in `src`, decoded into `length` bytes: every
 * block's size is checked against the frame's block maximum and the bytes left before lz4js decodes it, and decoding
 * stops at the first block that goes past `length`. Checksums are skipped (Arrow's writers set none).
 */
function decodeLz4Frames(decompressBlock: DecompressBlock, src: Uint8Array, length: number): Uint8Array {
  const view = new DataView(src.buffer, src.byteOffset, src.byteLength);
  const damaged = (why: string) => new DatasetFormatError(`a buffer compressed with LZ4_FRAME (${src.length} bytes) is damaged: ${why}`);
  const out = new Uint8Array(length);
  let at = 0;
  let written = 0;
  const u32 = (what: string) => {
    if (at + 4 > src.length) throw damaged(`it ends inside ${what} (byte ${at})`);
    const v = view.getUint32(at, true);
    at += 4;
    return v;
  };
  while (at < src.length) {
    const magic = u32('a frame header');
    if ((magic & 0xfffffff0) === LZ4_SKIPPABLE_MAGIC) {
      at += u32('a skippable frame');
      continue;
    }
    if (magic !== LZ4_FRAME_MAGIC) throw damaged(`no LZ4 frame starts at byte ${at - 4}`);
    if (at + 3 > src.length) throw damaged('it ends inside a frame header');
    const flg = src[at];
    const blockMax = LZ4_BLOCK_MAX[(src[at + 1] >> 4) & 7];
    if (flg >> 6 !== 1) throw damaged(`frame version ${flg >> 6} (LZ4 frames are version 1)`);
    if (blockMax === undefined) throw damaged(`block maximum size id ${(src[at + 1] >> 4) & 7}`);
    // FLG, BD, the content size and dictionary id where present, the header checksum
    at += 2 + (flg & FLG_CONTENT_SIZE ? 8 : 0) + (flg & FLG_DICT_ID ? 4 : 0) + 1;
    for (;;) {
      const word = u32('a block header');
      if (word === 0) break;
      const size = word & ~BLOCK_UNCOMPRESSED;
      if (size > blockMax || at + size > src.length) {
        throw damaged(`a block of ${size} bytes at byte ${at - 4}, past the frame's ${blockMax}-byte blocks or the ${src.length - at} bytes left`);
      }
      let end: number;
      if (word & BLOCK_UNCOMPRESSED) {
        end = written + size;
        if (end <= length) out.set(src.subarray(at, at + size), written);
      } else {
        end = decompressBlock(src, out, at, size, written);
      }
      if (end > length) throw new DatasetFormatError(`a buffer compressed with LZ4_FRAME decodes to more than the ${length} bytes its length prefix gives (a damaged file?)`);
      written = end;
      at += size + (flg & FLG_BLOCK_CHECKSUM ? 4 : 0);
    }
    if (flg & FLG_CONTENT_CHECKSUM) at += 4;
  }
  if (at > src.length) throw damaged('it ends inside a frame');
  return out.subarray(0, written);
}
