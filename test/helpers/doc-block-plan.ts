/**
 * What the tests do with each documentation block (doc-blocks.ts): a block is run as written by the runner of its
 * language, unless it is listed here — as a server (run until its URL answers, then stopped), as run by another test,
 * or as not run, with the reason. A block in a language no runner runs must be listed; `text` blocks (diagrams,
 * trees, listings) are not code. test/unit/doc-blocks.test.ts holds every block to this plan, so a new block runs
 * or says why not, and an entry whose block is gone fails.
 */
import type { DocBlock } from './doc-blocks.js';

const SH = 'test/integration/doc-sh-blocks.test.ts';
const TS = 'test/integration/doc-ts-blocks.test.ts';
const JSON_ = 'test/unit/doc-json-blocks.test.ts';

/** The test that runs the blocks of each language. */
export const RUNNERS: Readonly<Record<string, string>> = {
  sh: SH, bash: SH,
  ts: TS, typescript: TS, mts: TS, js: TS, javascript: TS, mjs: TS,
  json: JSON_, jsonc: JSON_,
};

/** Languages that are not code: diagrams, trees, listings. */
export const TEXT_LANGS: ReadonlySet<string> = new Set(['text']);

export type Listed =
  /** starts a server that never exits: runs until the URL `server` answers, stays up for the file's later blocks, then
   * is stopped; the URLs `also` must answer too */
  | { server: string; also?: string[] }
  /** run as written by another test */
  | { by: string }
  /** not run: why it cannot run on a CI machine */
  | { reason: string };

const NEEDS_DOCKER = 'needs a Docker engine (CI has only the client); infra-compose.test.ts and dockerfile.test.ts check the files statically';
const NEEDS_CLUSTER = 'needs a Kubernetes cluster and a registry; infra-k8s.test.ts, infra-helm.test.ts and infra-yaml.test.ts check the objects statically';

/** Per file, blocks by the start of their key (their first line with a letter or digit). */
export const LISTED: Readonly<Record<string, Readonly<Record<string, Listed>>>> = {
  'README.md': {
    'scripts/demo ': { reason: 'scripts/setup (run by scripts/test), then the demo at 1M rows, which pipeline-demo.test.ts runs at a small size; scripts/test is the whole suite' },
  },
  'CONTRIBUTING.md': {
    'scripts/setup ': { by: 'scripts/test' },
    'scripts/test ': { reason: 'the whole suite, set-up included: what CI runs (.ci/run); a test cannot run the suite it is part of' },
    'scripts/gpu-pack ': { reason: 'builds the sm_90 addon and the CUDA tools with nvcc (many minutes on 2 cores) and packs a Node + Redis runtime from outside the repository, for the GPU machine' },
    'scripts/gpu-run ': { reason: 'needs a GPU: runs on the GPU machine' },
  },
  'docs/api.md': {
    'export REDIS_URL=': { server: 'http://127.0.0.1:8090/healthz' },
    'kmfleet api --host 0.0.0.0': { server: 'http://127.0.0.1:8090/healthz' },
  },
  'docs/operations.md': {
    'scripts/setup ': { by: 'scripts/test' },
    'docker compose -f infra/compose/compose.yaml up -d --build': { reason: NEEDS_DOCKER },
    'kmfleet generate --rows 1000000 --dims 32 --centers 64 --out data.npy           # or any': { reason: `uploads to and runs in the compose stack's MinIO and worker containers: ${NEEDS_DOCKER}` },
    "import Fastify from 'fastify';": { server: 'http://127.0.0.1:3000/ops/kmfleet/', also: ['http://127.0.0.1:3000/ops/kmfleet/api/queue'] },
    'docker build -t registry.example.com/kmfleet': { reason: `an image build and push, then kubectl apply: ${NEEDS_DOCKER}; ${NEEDS_CLUSTER}` },
    'kubectl create namespace kmfleet && kubectl label': { reason: NEEDS_CLUSTER },
    '# patch of ScaledObject kmfleet-worker': { reason: `a kustomize patch applied in a cluster: ${NEEDS_CLUSTER}` },
    'OTEL_EXPORTER_OTLP_ENDPOINT=': { reason: 'settings for the processes to trace, not a command; tracing-settings.test.ts checks what they accept and tracing.test.ts traces a job' },
    'OTEL_TRACES_EXPORTER=otlp docker compose': { reason: NEEDS_DOCKER },
    'aws s3api put-bucket-lifecycle-configuration': { reason: 'needs the AWS CLI and a store that keeps lifecycle rules (s3rver has none); the uploads it cleans up are checked in test/faults/s3-uploads.test.ts' },
  },
  'docs/redis-contract.md': {
    '-- KEYS:': { by: 'test/integration/redis-contract.test.ts' },
  },
};

/** Port numbers a file's blocks use (servers, their URLs): the runners give each a free port, the same in all the file's blocks. */
export const PORTS: Readonly<Record<string, readonly number[]>> = {
  'docs/api.md': [8090],
  'docs/operations.md': [3000],
};

export type Plan = { how: 'run' | 'server' | 'text' | 'by' | 'not-run' | 'unplanned'; detail: string };

/** The listed entry of a block, if any (with the entry's key, to find entries no block matches). */
export function listing(b: DocBlock): { entry: string; listed: Listed } | undefined {
  const entries = Object.entries(LISTED[b.file] ?? {}).filter(([k]) => b.key.startsWith(k));
  if (entries.length > 1) throw new Error(`${b.file}:${b.line}: several entries of doc-block-plan.ts match its block: ${entries.map(([k]) => k).join(' | ')}`);
  return entries[0] && { entry: entries[0][0], listed: entries[0][1] };
}

export function plan(b: DocBlock): Plan {
  if (TEXT_LANGS.has(b.lang)) return { how: 'text', detail: 'not code' };
  const l = listing(b)?.listed;
  if (l && 'reason' in l) return { how: 'not-run', detail: l.reason };
  if (l && 'by' in l) return { how: 'by', detail: l.by };
  const runner = RUNNERS[b.lang];
  if (!runner) return { how: 'unplanned', detail: b.lang ? `no runner runs ${b.lang} blocks` : 'the fence names no language' };
  if (l && 'server' in l) return { how: 'server', detail: runner };
  return { how: 'run', detail: runner };
}

/** The blocks a runner runs: its languages' blocks that are run or servers. */
export function blocksFor(runner: string, blocks: readonly DocBlock[]): DocBlock[] {
  return blocks.filter((b) => ['run', 'server'].includes(plan(b).how) && plan(b).detail === runner);
}

export interface RunContext {
  redisUrl: string;
  /** documented port → the free port the test gives it */
  ports: ReadonlyMap<number, number>;
}

/** The only changes made to a block (or a server's probe URL) before it runs: the test's Redis URL and free ports. */
export function asRun(text: string, ctx: RunContext): string {
  let out = text.replaceAll('redis://127.0.0.1:6379', ctx.redisUrl);
  for (const [doc, free] of ctx.ports) out = out.replace(new RegExp(`\\b${doc}\\b`, 'g'), String(free));
  return out;
}
