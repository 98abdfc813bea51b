/**
 * The k-means core that the worker and `kmfleet fit` share: Lloyd's loop over an engine (kmeans/), the dataset
 * formats (formats/), and the row sources that need no service (dataset/: the interface, a local file, a seeded
 * synthetic dataset). Everything outside core/ imports it through this module; it imports only native/index.ts.
 */
export * from './kmeans/index.js';
export * from './formats/index.js';
export { checkReadRange, checkRowRange, type FileRows, type ReadHint, type RowSource } from './dataset/row-source.js';
export { decodedLayout, describeLayout, LocalFileSource, type DatasetFormat, type LocalFileSourceOptions } from './dataset/local-file-source.js';
export { checkSyntheticOptions, generateDataset, type SyntheticKind, type SyntheticOptions, type SyntheticResult } from './dataset/synthetic.js';
export { readConverted } from './dataset/converted-read.js';
export { ParquetRows } from './dataset/parquet-rows.js';
export { ArrowRows } from './dataset/arrow-rows.js';
export type { DecodedColumn } from './dataset/decoded-batches.js';
export { readFileRange } from './dataset/parallel-read.js';
export { formatByteSize, parseByteSize } from './byte-size.js';
export { chooseGpus, keptDatasetBytes, parseGpus, type FreeGpu, type GpuCount } from './gpu-count.js';
