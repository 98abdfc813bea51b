/**
 * The runner of the documentation's json and jsonc blocks (test/helpers/doc-block-plan.ts): each parses as written
 * (jsonc: comments allowed, by TypeScript's own JSON-with-comments parser), and a block that shows a document with a
 * schema — the job spec — validates against that schema and the workers' own parser.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import Ajv2020 from 'ajv/dist/2020.js';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { parseJobSpec } from '../../producer/spec.js';
import { blocksFor } from '../helpers/doc-block-plan.js';
import { allDocBlocks, ROOT, where, type DocBlock } from '../helpers/doc-blocks.js';

const blocks = blocksFor('test/unit/doc-json-blocks.test.ts', allDocBlocks());

/** Blocks that show a job spec, by file and the start of their key. */
const JOB_SPECS: Record<string, string> = {
  'producer/README.md': '"version": 1,',
};

function parse(b: DocBlock): unknown {
  if (b.lang === 'json') return JSON.parse(b.code);
  const r = ts.parseConfigFileTextToJson(`${b.file}.jsonc`, b.code);
  if (r.error) throw new Error(`${where(b)}: ${ts.flattenDiagnosticMessageText(r.error.messageText, '\n')}`);
  return r.config;
}

describe('documentation json blocks', () => {
  it('are there to run, the job specs among them', () => {
    expect(blocks.length).toBeGreaterThan(1);
    for (const [file, key] of Object.entries(JOB_SPECS)) expect(blocks.some((b) => b.file === file && b.key.startsWith(key)), `${file}: ${key}`).toBe(true);
  });

  it.each(blocks.map((b) => [where(b), b] as const))('%s parses as written', (_name, b) => {
    const value = parse(b);
    expect(typeof value, where(b)).toBe('object');
    if (!b.key.startsWith(JOB_SPECS[b.file] ?? '\0')) return;
    const schema = JSON.parse(readFileSync(join(ROOT, 'api', 'job-spec.schema.json'), 'utf8'));
    const validate = new Ajv2020.default({ strict: true, allErrors: true }).compile(schema);
    expect(validate(value), `${where(b)}: ${JSON.stringify(validate.errors)}`).toBe(true);
    expect(() => parseJobSpec(value), where(b)).not.toThrow();
  });
});
