/**
 * The Snappy decoder handed to hyparquet for Parquet pages: each element of the block is checked before hyparquet's own
 * decoder runs — literals inside the input, copies reaching back no further than what was written, the output exactly
 * the page's size. hyparquet's decoder reads a 4-byte literal length as a signed number, and a damaged one sends its
 * position backwards: seconds of work on a page of a few hundred bytes, or no end at all.
 */
import { DatasetFormatError } from './errors.js';

type Uncompress = (input: Uint8Array, output: Uint8Array) => void;

const damaged = (why: string) => new DatasetFormatError(`a Snappy-compressed page is damaged: ${why}`);

/** Walks the block's elements; throws DatasetFormatError unless they decode to exactly `size` bytes. */
export function checkSnappyBlock(input: Uint8Array, size: number): void {
  let pos = 0;
  let declared = 0;
  for (let shift = 0; ; shift += 7) {
    if (pos >= input.length || shift > 28) throw damaged('its length header does not end');
    const c = input[pos++];
    declared += (c & 0x7f) * 2 ** shift;
    if (c < 0x80) break;
  }
  if (declared !== size) throw damaged(`it declares ${declared} bytes, not the ${size} of its page header`);
  let out = 0;
  while (pos < input.length) {
    const c = input[pos++];
    const kind = c & 3;
    let len: number;
    if (kind === 0) {
      len = (c >>> 2) + 1;
      if (len > 60) {
        const bytes = len - 60;
        if (pos + bytes > input.length) throw damaged('a literal length runs past its end');
        len = 1;
        for (let i = 0; i < bytes; i++) len += input[pos + i] * 2 ** (8 * i);
        pos += bytes;
      }
      if (pos + len > input.length) throw damaged(`a literal of ${len} bytes runs past its end`);
      pos += len;
    } else {
      const offsetBytes = kind === 1 ? 1 : kind === 2 ? 2 : 4;
      if (pos + offsetBytes > input.length) throw damaged('a copy runs past its end');
      let offset = kind === 1 ? input[pos] + ((c >>> 5) << 8) : 0;
      if (kind !== 1) for (let i = 0; i < offsetBytes; i++) offset += input[pos + i] * 2 ** (8 * i);
      len = kind === 1 ? ((c >>> 2) & 7) + 4 : (c >>> 2) + 1;
      pos += offsetBytes;
      if (offset === 0 || offset > out) throw damaged(`a copy reaches ${offset} bytes back from byte ${out}`);
    }
    out += len;
    if (out > size) throw damaged(`it decodes to more than ${size} bytes`);
  }
  if (out !== size) throw damaged(`it decodes to ${out} bytes, not ${size}`);
}

/** hyparquet's `compressors.SNAPPY`: the block checked, then decoded by `uncompress` (hyparquet's snappyUncompress). */
export function checkedSnappy(uncompress: Uncompress): (input: Uint8Array, size: number) => Uint8Array {
  return (input, size) => {
    checkSnappyBlock(input, size);
    const output = new Uint8Array(size);
    uncompress(input, output);
    return output;
  };
}
