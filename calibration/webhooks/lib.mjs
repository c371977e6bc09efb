// Imports the pinned npm packages that calibration/install.sh puts in .cache/calibration/node,
// whether a package is CommonJS (standardwebhooks, svix) or an ES module exported for Node only
// (@octokit/webhooks-methods).
import { readFileSync } from 'node:fs';

const MODULES = new URL('../../.cache/calibration/node/node_modules/', import.meta.url);

export async function lib(name) {
  const dir = new URL(`${name}/`, MODULES);
  const pkg = JSON.parse(readFileSync(new URL('package.json', dir), 'utf8'));
  const ex = pkg.exports?.['.'] ?? pkg.exports;
  const entry = (typeof ex === 'string' ? ex : ex?.node?.import ?? ex?.import ?? ex?.default?.import ?? ex?.default)
    ?? pkg.module ?? pkg.main ?? 'index.js';
  const mod = await import(new URL(entry, dir).href);
  // A CommonJS package's exports are its default export.
  return pkg.type === 'module' ? mod : (mod.default ?? mod);
}
