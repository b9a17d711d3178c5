// The files a program is made of (docs/AGENTS.md, "Agents in TypeScript"): its entry module and
// every project module reachable from it through relative imports, found by reading the
// sources, since Node does not say which modules a program loaded.

import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, isAbsolute, relative, resolve, sep } from "node:path";

/** Most files followed from one entry: a bound on a scan of a hostile or odd tree. */
const FILES_MAX = 256;

/** Static `import`/`export ... from` and `import "x"` specifiers, and dynamic `import("x")` or
 * CommonJS `require("x")` with a literal: the forms a module graph is written in. */
const SPECIFIERS = [
  /(?:^|[^\w$.])(?:import|export)\s*(?:[\w$*{}\s,]*?\s*from\s*)?["']([^"'\n]+)["']/g,
  /(?:^|[^\w$.])(?:import|require)\s*\(\s*["']([^"'\n]+)["']\s*\)/g,
];

/** The relative specifiers `source` imports. */
export function importsOf(source) {
  const found = [];
  for (const re of SPECIFIERS) {
    for (const m of source.matchAll(re)) {
      if (m[1].startsWith("./") || m[1].startsWith("../")) found.push(m[1]);
    }
  }
  return found;
}

function isFile(path) {
  try {
    return existsSync(path) && statSync(path).isFile();
  } catch {
    return false;
  }
}

/** `path` relative to `root`, `/`-separated, or null when it is outside `root` or in a
 * `node_modules` (a dependency is not the program's own file). */
function underRoot(root, path) {
  const rel = relative(root, path);
  if (rel === "" || rel.startsWith("..") || isAbsolute(rel)) return null;
  const parts = rel.split(sep);
  if (parts.includes("node_modules")) return null;
  return parts.join("/");
}

/**
 * The program's files: `entry` and the modules its relative imports reach, transitively, as
 * sorted paths relative to `root`. Bare specifiers (packages, `node:` builtins) and files
 * outside `root` are not followed; a specifier that names no file is skipped (the import
 * itself would fail).
 */
export function programFiles(entry, root = process.cwd()) {
  const rootAbs = resolve(root);
  const seen = new Set();
  const queue = [resolve(rootAbs, entry)];
  while (queue.length > 0 && seen.size < FILES_MAX) {
    const path = queue.shift();
    if (seen.has(path) || !isFile(path) || underRoot(rootAbs, path) === null) continue;
    seen.add(path);
    let source;
    try {
      source = readFileSync(path, "utf8");
    } catch {
      continue;
    }
    for (const spec of importsOf(source)) queue.push(resolve(dirname(path), spec));
  }
  return [...seen].map((p) => underRoot(rootAbs, p)).sort();
}
