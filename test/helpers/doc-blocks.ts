/**
 * The fenced code blocks of the repository's documentation — README.md, CONTRIBUTING.md, docs/*.md and every other
 * README*.md of the tree — each with its file, line, language and code (an indented fence, as in a list item, is
 * dedented by its indent). The runners (test/integration/doc-*-blocks.test.ts) run them; doc-block-plan.ts says
 * which ones are not run, and why.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

export const ROOT = join(import.meta.dirname, '..', '..');

export interface DocBlock {
  /** relative to the repository root, with forward slashes */
  file: string;
  /** 1-based line of the opening fence */
  line: number;
  /** the info string's first word ('' when the fence has none) */
  lang: string;
  code: string;
  /** the first line with a letter or digit, trimmed: the block's name in the plan (line numbers move) */
  key: string;
}

/** Folders that hold no documentation of this repository (dependencies, build outputs, scratch). */
const SKIP = /^(node_modules|dist|build.*|tmp|out|\..*)$/;

function readmes(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) {
      if (!SKIP.test(entry.name)) found.push(...readmes(join(dir, entry.name)));
    } else if (/^README.*\.md$/i.test(entry.name)) found.push(relative(ROOT, join(dir, entry.name)));
  }
  return found;
}

/** Every documentation file whose blocks must run or be listed, sorted. */
export function docFiles(): string[] {
  const docs = readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`);
  return [...new Set(['README.md', 'CONTRIBUTING.md', ...docs, ...readmes(ROOT)])].sort();
}

/** The fenced blocks of one file (``` or ~~~ fences, indented or not, each closed by a run at least as long). */
export function docBlocks(file: string): DocBlock[] {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
  const blocks: DocBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^( *)(`{3,}|~{3,})\s*([^\s`]*)/.exec(lines[i]);
    if (!open) continue;
    const [, indent, fence, lang] = open;
    const close = new RegExp(`^ *${fence[0] === '`' ? '`' : '~'}{${fence.length},}\\s*$`);
    let end = i + 1;
    while (end < lines.length && !close.test(lines[end])) end++;
    if (end === lines.length) throw new Error(`${file}:${i + 1}: a code fence that is never closed`);
    const code = lines.slice(i + 1, end).map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l.trimStart())).join('\n');
    const key = code.split('\n').find((l) => /[A-Za-z0-9]/.test(l))?.trim() ?? '';
    blocks.push({ file, line: i + 1, lang, code, key });
    i = end;
  }
  return blocks;
}

export function allDocBlocks(): DocBlock[] {
  return docFiles().flatMap(docBlocks);
}

export const where = (b: DocBlock): string => `${b.file}:${b.line}`;
