/**
 * A package-lock.json for an empty project that depends on a packed kmfleet tarball, so that `npm ci --offline` can
 * install it from npm's cache: the cache holds the packages' tarballs but not the registry's metadata, which a plain
 * `npm install --offline` needs to resolve version ranges. The versions are the ones this repository's lockfile
 * resolved, and the set of packages is the closure of the PACKED package.json's dependencies, found by npm's own
 * lookup rule (the nearest node_modules up the tree) — so a build-time package back in `dependencies` shows up in the
 * consumer's node_modules.
 */

interface LockEntry {
  version?: string;
  resolved?: string;
  integrity?: string;
  link?: boolean;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  [field: string]: unknown;
}

interface Lockfile {
  packages: Record<string, LockEntry>;
}

interface PackedManifest {
  name: string;
  version: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  bin?: Record<string, string>;
  engines?: Record<string, string>;
  license?: string;
}

/** Where npm finds `name` for the package installed at `from` ('' = the project root). */
function locate(packages: Lockfile['packages'], from: string, name: string): string | undefined {
  let dir = from;
  for (;;) {
    const candidate = `${dir ? `${dir}/` : ''}node_modules/${name}`;
    if (packages[candidate]) return candidate;
    if (!dir) return undefined;
    const cut = dir.lastIndexOf('/node_modules/');
    dir = cut < 0 ? '' : dir.slice(0, cut);
  }
}

export function consumerLockfile(repoLock: Lockfile, packed: PackedManifest, tarball: string): object {
  const keep = new Set<string>();
  const visit = (from: string, deps: Record<string, string>, optional: Set<string>) => {
    for (const name of Object.keys(deps)) {
      const at = locate(repoLock.packages, from, name);
      if (!at) {
        if (optional.has(name)) continue; // an optional dependency npm skipped (another platform, say)
        throw new Error(`${name} (needed by ${from || packed.name}) is not in the repository's package-lock.json`);
      }
      if (keep.has(at)) continue;
      keep.add(at);
      const e = repoLock.packages[at];
      const optionalPeers = Object.entries(e.peerDependenciesMeta ?? {}).filter(([, m]) => m.optional).map(([n]) => n);
      const required = Object.fromEntries(
        Object.entries(e.peerDependencies ?? {}).filter(([n]) => !optionalPeers.includes(n)),
      );
      visit(at, { ...e.dependencies, ...e.optionalDependencies, ...required }, new Set(Object.keys(e.optionalDependencies ?? {})));
    }
  };
  const own = { ...packed.dependencies, ...packed.optionalDependencies };
  visit('', own, new Set(Object.keys(packed.optionalDependencies ?? {})));

  const packages: Record<string, LockEntry> = {
    '': { name: 'consumer', dependencies: { [packed.name]: `file:${tarball}` } },
    [`node_modules/${packed.name}`]: {
      version: packed.version,
      resolved: `file:${tarball}`,
      ...(packed.license ? { license: packed.license } : {}),
      ...(packed.dependencies ? { dependencies: packed.dependencies } : {}),
      ...(packed.optionalDependencies ? { optionalDependencies: packed.optionalDependencies } : {}),
      ...(packed.bin ? { bin: packed.bin } : {}),
      ...(packed.engines ? { engines: packed.engines } : {}),
    },
  };
  for (const at of [...keep].sort()) {
    const { dev, devOptional, peer, ...entry } = repoLock.packages[at];
    packages[at] = entry;
  }
  return { name: 'consumer', lockfileVersion: 3, requires: true, packages };
}
