#!/usr/bin/env bash
# Packs what bench/pipeline/run.mjs needs on the GPU machine (CUDA, no Node, npm or network) into .device/pipeline/:
# the compiled dist/ and the node_modules closure of the worker, the SDK and s3rver. The addon and Node + Redis come
# from scripts/gpu-pack's .device/ (kmfleet_native.node, runtime.tar.xz). Then, with the device tool
# (carry [".device/pipeline", ".device/runtime.tar.xz", ".device/kmfleet_native.node"]):
#   mkdir -p /tmp/rt && tar -xJf .device/runtime.tar.xz -C /tmp/rt && export PATH=/tmp/rt/bin:$PATH
#   tar -xJf .device/pipeline/pack.tar.xz && KMFLEET_ADDON=$PWD/.device/kmfleet_native.node node bench/pipeline/run.mjs --backend cuda
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.device/pipeline
mkdir -p "$out"
npm run --silent build:ts
node - bullmq ioredis @aws-sdk/client-s3 s3rver pino zod commander prom-client yaml >"$out/files.list" <<'JS'
// the files of the given packages and everything they need (package-lock.json + node's lookup rules)
const fs = require('fs');
const path = require('path');
const lock = JSON.parse(fs.readFileSync('package-lock.json', 'utf8')).packages;
const seen = new Set();
function find(from, name) {
  let dir = from;
  for (;;) {
    const p = (dir ? dir + '/' : '') + 'node_modules/' + name;
    if (lock[p] && fs.existsSync(p)) return p;
    if (!dir) return null;
    const i = dir.lastIndexOf('/node_modules/');
    dir = i < 0 ? '' : dir.slice(0, i);
  }
}
function walk(p) {
  if (seen.has(p) || /node_modules\/(@types\/|undici-types)/.test(p)) return;
  seen.add(p);
  const e = lock[p] || {};
  for (const deps of [e.dependencies, e.optionalDependencies, e.peerDependencies])
    for (const n of Object.keys(deps || {})) {
      const q = find(p, n);
      if (q) walk(q);
    }
}
for (const r of process.argv.slice(2)) walk('node_modules/' + r);
function files(dir) {
  for (const ent of fs.readdirSync(dir, { withFileTypes: true })) {
    const f = path.join(dir, ent.name);
    if (ent.isDirectory()) {
      if (ent.name !== 'node_modules') files(f);
    } else console.log(f);
  }
}
for (const p of seen) files(p);
JS
find dist -type f -name '*.js' >>"$out/files.list"
echo package.json >>"$out/files.list"
tar -cf - -T "$out/files.list" | xz -T2 -6 >"$out/pack.tar.xz"
du -ch "$out/pack.tar.xz" .device/runtime.tar.xz .device/kmfleet_native.node
