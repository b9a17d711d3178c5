// An adjudicator in TypeScript run as the runtime runs an `--oracle-cmd` program: a request on
// stdin, the verdict (or nothing) on stdout, the function's own prints kept off stdout.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { verdict } from "../index.js";

const SDK = dirname(dirname(fileURLToPath(import.meta.url)));

function program(body) {
  const dir = mkdtempSync(join(tmpdir(), "adjudicator-"));
  const path = join(dir, "review.mjs");
  const index = pathToFileURL(join(SDK, "index.js")).href;
  writeFileSync(
    path,
    `import { adjudicator, verdict } from ${JSON.stringify(index)};\n` +
      `const review = adjudicator(async (request) => { ${body} });\nawait review.main();\n`,
  );
  return path;
}

const REQUEST = { run: "r-1", handle: "adj-15", challenger: { value: "none" } };

test("a verdict is printed as one JSON object, prints go to stderr", () => {
  const path = program(
    'console.log("thinking"); return verdict("affirm", { note: "referral " + request.challenger.value });',
  );
  const r = spawnSync("node", [path], { input: `${JSON.stringify(REQUEST)}\n`, encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), {
    verdict: "affirm",
    evidence: "external_first_hand",
    note: "referral none",
  });
  assert.match(r.stderr, /thinking/);
});

test("null leaves the request to a person: nothing printed", () => {
  const r = spawnSync("node", [program("return null;")], {
    input: `${JSON.stringify(REQUEST)}\n`,
    encoding: "utf8",
  });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, "");
});

test("a word that is no verdict is refused", () => {
  assert.throws(() => verdict("maybe"), /expected one of affirm, deny, unknown/);
});
