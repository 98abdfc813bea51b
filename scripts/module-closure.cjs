// Lists the files of the given npm packages and of everything they need (package-lock.json + node's lookup rules),
// one path per line: what a machine without npm (the GPU machine) must be sent to run them. Type-only packages are
// left out. Used by scripts/gpu-pack and bench/pipeline/pack-device.sh.
//   node scripts/module-closure.cjs vitest bullmq ... > files.list
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
