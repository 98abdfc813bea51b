/** Parquet files of embedding columns written with hyparquet-writer, as pyarrow lays out list<float> (a 3-level LIST). */
import { parquetWriteBuffer } from 'hyparquet-writer';

export type ElementType = 'FLOAT' | 'DOUBLE' | 'FLOAT16' | 'INT32' | 'BYTE_ARRAY';

export interface EmbeddingColumn {
  name: string;
  /** one list (or null) per row; for a scalar column, one value per row */
  data: unknown[];
  element: ElementType;
  /** a plain column of `element`, not a list */
  scalar?: boolean;
}

/** `columns` as a Parquet file, `rowGroupSize` rows a row group. */
export function encodeParquet(columns: EmbeddingColumn[], rowGroupSize: number): Buffer {
  const schema: Record<string, unknown>[] = [{ name: 'root', num_children: columns.length }];
  for (const c of columns) {
    const leaf = c.element === 'FLOAT16'
      ? { type: 'FIXED_LEN_BYTE_ARRAY', type_length: 2, logical_type: { type: 'FLOAT16' } }
      : { type: c.element };
    if (c.scalar) {
      schema.push({ name: c.name, repetition_type: 'OPTIONAL', ...leaf });
    } else {
      schema.push({ name: c.name, repetition_type: 'OPTIONAL', converted_type: 'LIST', num_children: 1 });
      schema.push({ name: 'list', repetition_type: 'REPEATED', num_children: 1 });
      schema.push({ name: 'element', repetition_type: 'OPTIONAL', ...leaf });
    }
  }
  const ab = parquetWriteBuffer({
    columnData: columns.map((c) => ({ name: c.name, data: c.data as never[] })),
    schema: schema as never,
    rowGroupSize,
  });
  return Buffer.from(ab);
}

/** rows of `dims` values from a flat array */
export function asLists(values: ArrayLike<number>, dims: number): number[][] {
  const out: number[][] = [];
  for (let r = 0; r < values.length / dims; r++) out.push(Array.from({ length: dims }, (_, j) => values[r * dims + j]));
  return out;
}
