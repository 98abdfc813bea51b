/**
 * The API's checked-in documents are what the code generates — api/openapi.json from the route table and zod schemas,
 * api/job-spec.schema.json from the spec's zod schema — and they say what the code does: the JSON Schema accepts and
 * refuses the same specs as parseJobSpec (for what a schema can say), and every route has a handler.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Ajv2020 from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { makeHandlers } from '../../api/handlers.js';
import { fieldDoc, fieldPaths, jobSpecJsonSchema, jobSpecJsonSchemaText } from '../../api/job-spec-json-schema.js';
import { buildOpenApi, openApiText } from '../../api/openapi.js';
import { ROUTES } from '../../api/routes.js';
import { parseJobSpec } from '../../producer/spec.js';
import { DEFAULT_LIMITS } from '../../producer/limits.js';

const ROOT = join(import.meta.dirname, '..', '..');
const read = (p: string) => readFileSync(join(ROOT, p), 'utf8');

describe('api/openapi.json and api/job-spec.schema.json', () => {
  it('api/openapi.json is the generated document (regenerate: node dist/api/openapi.js > api/openapi.json)', () => {
    expect(read('api/openapi.json')).toBe(openApiText());
  });

  it('api/job-spec.schema.json is the generated schema (regenerate: node dist/api/job-spec-json-schema.js > api/job-spec.schema.json)', () => {
    expect(read('api/job-spec.schema.json')).toBe(jobSpecJsonSchemaText());
  });

  it('describes every field of the spec', () => {
    const paths = fieldPaths(jobSpecJsonSchema() as never);
    expect(paths).toContain('dataset.uri');
    expect(paths.filter((p) => !fieldDoc(p))).toEqual([]);
  });

  it('the JSON Schema accepts and refuses what parseJobSpec does', () => {
    const ajv = new Ajv2020.default({ strict: true, allErrors: true });
    const validate = ajv.compile(JSON.parse(read('api/job-spec.schema.json')));
    const base = { dataset: { uri: 's3://data/emb.npy' }, k: 8, output: 's3://out/runs' };
    const cases: unknown[] = [
      base,
      { ...base, output: 's3://out' },
      { ...base, output: 's3://out/a/b/' },
      { ...base, init: 'random', metric: 'cosine', precision: 'fp16', backend: 'cpu', seed: 2 ** 32 - 1 },
      { ...base, init: 's3://data/c.npy', tol: 0, tolReassign: 1, maxIter: 10_000, checkpointEvery: 0 },
      { ...base, dataset: { uri: 's3://data/x.f16', format: 'f16', dims: 768 } },
      { ...base, name: 'emb-v2.1_a', version: 1 },
      { ...base, dataset: { uri: 's3://data/x.npy', convert: 'f64-to-f32' } },
      { ...base, dataset: { uri: 's3://data/x.npy', convert: 'f64' } },
      { ...base, k: 0 },
      { ...base, k: 1.5 },
      { ...base, k: DEFAULT_LIMITS.maxK + 1 },
      { ...base, k: '8' },
      { ...base, dataset: { uri: 'http://data/x.npy' } },
      { ...base, dataset: { uri: 's3://data/' } },
      { ...base, dataset: { uri: 's3://Data/x.npy' } },
      { ...base, dataset: { uri: 's3://data/x.npy', format: 'f64' } },
      { ...base, dataset: { uri: 's3://data/x.npy', dims: 0 } },
      { ...base, dataset: { uri: 's3://data/x.npy', extra: 1 } },
      { ...base, output: 'out/runs' },
      { ...base, init: 'kmeans' },
      { ...base, init: 's3://data/c.bin' },
      { ...base, metric: 'L2' },
      { ...base, tolReassign: 1.5 },
      { ...base, tol: -1 },
      { ...base, seed: 2 ** 32 },
      { ...base, name: 'has space' },
      { ...base, version: 2 },
      { ...base, maxiter: 5 },
      { dataset: { uri: 's3://data/x.npy' }, k: 8 },
      [],
      'spec',
    ];
    for (const c of cases) {
      let codeAccepts = true;
      try {
        parseJobSpec(c, { ...DEFAULT_LIMITS });
      } catch {
        codeAccepts = false;
      }
      expect(validate(c), JSON.stringify(c)).toBe(codeAccepts);
    }
  });

  it('declares a handler for every route, and every operation once', () => {
    const handlers = makeHandlers({ client: {} as never, openapi: () => ({}) });
    for (const r of ROUTES) if (r.operationId !== 'jobEvents') expect(handlers[r.operationId], r.operationId).toBeTypeOf('function');
    const doc = buildOpenApi() as { paths: Record<string, Record<string, { operationId: string }>> };
    const ops = Object.values(doc.paths).flatMap((p) => Object.values(p).map((o) => o.operationId));
    expect(ops.sort()).toEqual(ROUTES.map((r) => r.operationId).sort());
    expect(new Set(ops).size).toBe(ops.length);
  });
});
