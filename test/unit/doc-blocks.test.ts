/**
 * Every fenced block of the documentation (test/helpers/doc-blocks.ts) is run as written by the runner of its language
 * or listed in test/helpers/doc-block-plan.ts — as a server, as run by another test, or as not run with its reason.
 * A new block in a language without a runner, or without a language, fails here; so does an entry whose block is gone.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LISTED, listing, plan, PORTS, RUNNERS } from '../helpers/doc-block-plan.js';
import { allDocBlocks, docBlocks, docFiles, ROOT, where } from '../helpers/doc-blocks.js';

const blocks = allDocBlocks();

describe('documentation blocks', () => {
  it('are found in the README, CONTRIBUTING, docs/ and the other READMEs, with their lines', () => {
    const files = docFiles();
    for (const f of ['README.md', 'CONTRIBUTING.md', 'docs/api.md', 'docs/operations.md', 'producer/README.md']) expect(files).toContain(f);
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8').split('\n');
    for (const b of docBlocks('README.md')) expect(readme[b.line - 1]).toBe('```' + b.lang);
    // an indented fence (in a list item) is dedented
    const mount = docBlocks('docs/operations.md').find((b) => b.key === "import Fastify from 'fastify';");
    expect(mount?.code.split('\n')[0]).toBe("import Fastify from 'fastify';");
  });

  it('each runs as written or is listed with the reason', () => {
    const unplanned = blocks.filter((b) => plan(b).how === 'unplanned').map((b) => `${where(b)} (${plan(b).detail}): ${b.key}`);
    expect(unplanned, 'run these in a runner or list them in test/helpers/doc-block-plan.ts (a diagram or listing: ```text)').toEqual([]);
  });

  it('every listed entry names one block that is still there', () => {
    const used = new Set(blocks.map((b) => listing(b)).filter((l) => l).map((l) => l!.entry));
    const stale = Object.entries(LISTED).flatMap(([file, entries]) => Object.keys(entries).filter((k) => !used.has(k)).map((k) => `${file}: ${k}`));
    expect(stale).toEqual([]);
    for (const file of [...Object.keys(LISTED), ...Object.keys(PORTS)]) expect(docFiles()).toContain(file);
  });

  it('names blocks by keys that tell them apart', () => {
    const keys = blocks.map((b) => `${b.file}: ${b.key}`);
    expect(keys.filter((k, i) => keys.indexOf(k) !== i)).toEqual([]);
  });

  it('a block run by another test is named there', () => {
    for (const b of blocks.filter((x) => plan(x).how === 'by')) {
      const by = join(ROOT, plan(b).detail);
      expect(existsSync(by), `${where(b)}: ${plan(b).detail}`).toBe(true);
      const text = readFileSync(by, 'utf8');
      expect(text.includes(b.file) || text.includes(b.key.split(' ')[0]), `${plan(b).detail} names neither ${b.file} nor ${b.key}`).toBe(true);
    }
  });

  it('each runner exists and a reason says something', () => {
    for (const runner of new Set(Object.values(RUNNERS))) expect(existsSync(join(ROOT, runner)), runner).toBe(true);
    for (const b of blocks.filter((x) => plan(x).how === 'not-run')) expect(plan(b).detail.length, where(b)).toBeGreaterThan(20);
  });
});
