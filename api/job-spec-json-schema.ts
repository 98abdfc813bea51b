/**
 * The job spec (v1) as JSON Schema (draft 2020-12), generated from the spec's zod schema (producer/spec.ts) with the
 * default limits, for producers in other languages: what they may send (defaults are optional). Checked in as
 * api/job-spec.schema.json and tested to match. The zod schema checks its s3:// URIs in code (refinements have no JSON
 * Schema form), so the patterns here say the same in regular expressions; every field gets its description.
 * Cross-field rules stay in code: dims is required for raw formats, name for init 'previous', k × dims × 4 under
 * the centroid limit, buckets in KMFLEET_ALLOWED_BUCKETS. A deployment's KMFLEET_MAX_* may be lower than the maxima here.
 * Regenerate: `node dist/api/job-spec-json-schema.js > api/job-spec.schema.json` after `npm run build:ts`.
 */
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { JSON_SCHEMA_OPTIONS } from './json-schema-options.js';
import { DEFAULT_LIMITS } from '../producer/limits.js';
import { jobSpecSchema } from '../producer/spec.js';
import { INIT_METHODS } from '../producer/spec-vocabulary.js';

type JsonSchema = Record<string, unknown> & { properties?: Record<string, JsonSchema> };

const BUCKET = '[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]';
export const S3_OBJECT_PATTERN = `^s3://${BUCKET}/[^/].*[^/]$|^s3://${BUCKET}/[^/]$`;
export const S3_PREFIX_PATTERN = `^s3://${BUCKET}(/.*)?$`;

/** Field → description; a field of the spec without one fails the schema's test. */
const DOCS: Record<string, string> = {
  version: 'spec version; this API speaks 1',
  dataset: 'the data: N rows × D dims',
  'dataset.uri': 's3://bucket/key of the dataset',
  'dataset.format':
    'npy (float32 or float16 .npy, C order) | npz (np.savez archive; its member stored, not compressed) | parquet (one column of list<float>, list<halffloat> or list<double> with convert: one embedding a row) | arrow (Arrow IPC file (.arrow, Feather v2) or stream (.arrows), uncompressed, LZ4 or ZSTD: one column of FixedSizeList or List of float32, float16 or float64 with convert) | fvecs | bvecs (the ANN benchmarks\' records; bvecs read as float32) | f32 | f16 (raw little-endian rows, no header)',
  'dataset.dims': 'D; required for raw formats; for the others, if given, must match the file',
  'dataset.member': 'npz: the array to read, with or without .npy (default: the only array, or arr_0)',
  'dataset.column': 'parquet, arrow: the column of embeddings (default: the file\'s only column; with several, required)',
  'dataset.convert':
    "'f64-to-f32': accept a float64 .npy, npz member, Parquet or Arrow column (numpy's default dtype) and round it to float32 as it is read; without it such a file is refused",
  k: 'number of clusters (at most KMFLEET_MAX_K)',
  metric: 'l2 | cosine (spherical k-means: rows normalized, centroids renormalized)',
  init: "kmeans++ | random | previous (the latest result of model `name`; kmeans++ when it has none) | s3://bucket/key.npy of K×D float32 centroids",
  maxIter: 'iterations at most (at most KMFLEET_MAX_ITER)',
  tol: "sklearn's meaning: stop when the sum of squared centroid shifts <= tol × mean per-dimension variance; 0 = only on no movement",
  tolReassign: "kmcuda's meaning: stop when the fraction of rows that changed cluster <= tolReassign; 0 = only when none did",
  seed: 'seed of the init and of empty-cluster re-seeding',
  precision: 'auto | fp32 | tf32 | bf16 | fp16 (fp32, fp16, bf16: exact labels, fp16 and bf16 of the rows rounded to that type; tf32: approximate; auto: by the data type)',
  output: 's3://bucket[/prefix]; outputs go under <output>/<jobId>/',
  name: 'model name: result history, latest, warm starts (required for init previous)',
  checkpointEvery: 'write a checkpoint every N iterations; 0 = never',
  backend: 'auto | cpu | cuda',
  gpus: "GPUs of its worker the job runs on, its rows split between them (the same bits as on one): 1–64, 'all', or 'auto' (the fewest whose memory holds the rows); absent: the worker's KMFLEET_GPUS_PER_JOB",
};

/** Adds descriptions and the URI patterns to the zod-made schema of a spec (in place); returns it. */
export function describeJobSpec(schema: JsonSchema): JsonSchema {
  const visit = (node: JsonSchema, prefix: string) => {
    for (const [key, child] of Object.entries(node.properties ?? {})) {
      const path = prefix + key;
      const doc = DOCS[path];
      if (doc) child.description = doc;
      if (child.properties) visit(child, `${path}.`);
    }
  };
  visit(schema, '');
  const props = schema.properties!;
  props.dataset.properties!.uri.pattern = S3_OBJECT_PATTERN;
  props.output.pattern = S3_PREFIX_PATTERN;
  const initDoc = props.init.description;
  const initDefault = props.init.default;
  props.init = {
    description: initDoc,
    default: initDefault,
    anyOf: [
      { type: 'string', enum: [...INIT_METHODS] },
      { type: 'string', pattern: `^s3://${BUCKET}/.*\\.npy$` },
    ],
  };
  return schema;
}

/** Field paths of a schema (dotted), for the test that every field is described. */
export function fieldPaths(schema: JsonSchema, prefix = ''): string[] {
  return Object.entries(schema.properties ?? {}).flatMap(([k, child]) => [prefix + k, ...fieldPaths(child, `${prefix}${k}.`)]);
}

export function fieldDoc(path: string): string | undefined {
  return DOCS[path];
}

/** The zod schema the documents are made from: the spec with the default limits. */
export function documentedSpecSchema() {
  return jobSpecSchema({ ...DEFAULT_LIMITS });
}

/** The standalone JSON Schema document (api/job-spec.schema.json). */
export function jobSpecJsonSchema(): JsonSchema {
  const body = describeJobSpec(z.toJSONSchema(documentedSpecSchema(), JSON_SCHEMA_OPTIONS) as JsonSchema);
  const { $schema, ...rest } = body;
  return {
    $schema,
    $id: 'urn:kmfleet:job-spec:v1',
    title: 'kmfleet job spec v1',
    description:
      'What a producer sends to enqueue a k-means job (fields with defaults may be left out). Cross-field rules are checked ' +
      'when the job is enqueued: dataset.dims is required for raw formats, name for init "previous", k × dims × 4 must stay ' +
      'under KMFLEET_MAX_CENTROID_BYTES, and buckets must be in KMFLEET_ALLOWED_BUCKETS when it is set. Maxima are the ' +
      "defaults; a deployment's KMFLEET_MAX_* may be lower.",
    ...rest,
  };
}

/** The document as checked in: two-space JSON and a final newline. */
export function jobSpecJsonSchemaText(): string {
  return `${JSON.stringify(jobSpecJsonSchema(), null, 2)}\n`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) process.stdout.write(jobSpecJsonSchemaText());
