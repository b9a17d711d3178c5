// The SDK against a scripted fake runtime (pure Node): the messages it writes for each call,
// default step names, suspension on a question, failures, prints kept off stdout, and the
// program's files in `hello`.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { PassThrough } from "node:stream";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  CallDenied,
  PROTOCOL,
  SDK_NAME,
  SDK_VERSION,
  agent,
  pending,
  programFiles,
} from "../index.js";

const HERE = dirname(fileURLToPath(import.meta.url));
const SDK = dirname(HERE);

/**
 * A fake runtime: serves `program` and answers each of its replies with `script(reply)`'s
 * observations (`null`: close stdin, as the runtime does after a suspend). Every message the
 * program wrote, parsed, and how `serve` ended.
 */
async function drive(program, inputs, script, files = ["agent.mjs"]) {
  const input = new PassThrough();
  const sent = [];
  let round = 0;
  const write = (line) => {
    assert.ok(line.endsWith("\n") && !line.slice(0, -1).includes("\n"), "one line");
    const message = JSON.parse(line);
    sent.push(message);
    if (message.type === "hello") {
      input.write(`${JSON.stringify({ type: "start", inputs })}\n`);
      input.write(`${JSON.stringify({ type: "decide", round: round++, observations: [] })}\n`);
      return;
    }
    if (message.type === "done" || message.type === "fail") {
      input.end();
      return;
    }
    const observations = script(message);
    if (observations === null) {
      input.end();
      return;
    }
    input.write(`${JSON.stringify({ type: "decide", round: round++, observations })}\n`);
  };
  const ended = await program.serve(input, write, files);
  return { sent, ended };
}

/** Returns every call's `output` from `outputs[tool]`. */
function returning(outputs) {
  return (reply) =>
    reply.calls.map((c) => ({
      step: c.step,
      tool: c.tool,
      attempt: 1,
      outcome: "returned",
      output: outputs[c.tool],
    }));
}

test("hello names the protocol, the SDK, the program, its grants, inputs and files", async () => {
  const p = agent(
    { name: "triage", version: 2, grants: ["fs:read:data/**"], inputs: { path: "string" } },
    async () => "ok",
  );
  const { sent, ended } = await drive(p, {}, () => []);
  assert.equal(ended, "finished");
  assert.deepEqual(sent[0], {
    type: "hello",
    protocol: PROTOCOL,
    sdk: { name: SDK_NAME, version: SDK_VERSION },
    program: { name: "triage", version: 2 },
    grants: ["fs:read:data/**"],
    inputs: { type: "object", properties: { path: { type: "string" } }, required: [] },
    files: ["agent.mjs"],
  });
  assert.deepEqual(sent[1], { type: "done", output: "ok" });
});

test("the SDK's version is the package's", () => {
  const pkg = JSON.parse(readFileSync(join(SDK, "package.json"), "utf8"));
  assert.equal(pkg.name, SDK_NAME);
  assert.equal(pkg.version, SDK_VERSION);
});

test("calls get default step names TOOL#N per tool, and inputs reach the function", async () => {
  const p = agent({ name: "count" }, async (ctx, { text }) => {
    const a = await ctx.call("text.count", { text });
    const b = await ctx.call("text.count", { text: "x" }, { step: "again" });
    const c = await ctx.call("text.count", { text: "y" });
    return [a.words, b.words, c.words];
  });
  const { sent } = await drive(p, { text: "one two" }, returning({ "text.count": { words: 2 } }));
  const steps = sent.filter((m) => m.type === "calls").map((m) => m.calls[0].step);
  assert.deepEqual(steps, ["text.count#1", "again", "text.count#3"]);
  assert.deepEqual(sent[1].calls[0], {
    step: "text.count#1",
    tool: "text.count",
    input: { text: "one two" },
  });
  assert.deepEqual(sent.at(-1), { type: "done", output: [2, 2, 2] });
});

test("a reply names the program's line that made it", async () => {
  const p = agent({ name: "at" }, async (ctx) => ctx.call("text.count", { text: "a" }));
  const here = fileURLToPath(import.meta.url).slice(process.cwd().length + 1);
  const { sent } = await drive(p, {}, returning({ "text.count": {} }), [here]);
  assert.equal(sent[1].at.file, here);
  assert.ok(Number.isInteger(sent[1].at.line) && sent[1].at.line > 0, JSON.stringify(sent[1]));
});

test("gather makes its calls in one decision", async () => {
  const p = agent({ name: "g" }, async (ctx) =>
    ctx.gather(pending("text.count", { text: "a" }), pending("clock.wall", {}, { step: "t" })),
  );
  const out = { "text.count": { words: 1 }, "clock.wall": { unix_ms: 5 } };
  const { sent } = await drive(p, {}, returning(out));
  assert.equal(sent.filter((m) => m.type === "calls").length, 1);
  assert.deepEqual(
    sent[1].calls.map((c) => c.step),
    ["text.count#1", "t"],
  );
  assert.deepEqual(sent.at(-1).output, [{ words: 1 }, { unix_ms: 5 }]);
});

test("ask suspends on its step; the answer is the value; a closed stdin ends quietly", async () => {
  const p = agent({ name: "ask" }, async (ctx) => {
    const ok = await ctx.ask("ship it?", { schema: { type: "string" }, step: "approve" });
    return { approved: ok };
  });
  const asked = (reply) => [
    { step: "approve", tool: "human.ask", attempt: 1, outcome: "ask", question: "ship it?" },
  ];
  // A first run: the call, then the suspension, then the runtime closes stdin.
  let n = 0;
  const first = await drive(p, {}, (reply) => (n++ === 0 ? asked(reply) : null));
  assert.equal(first.ended, "closed");
  assert.deepEqual(first.sent[1].calls[0], {
    step: "approve",
    tool: "human.ask",
    input: { question: "ship it?", schema: { type: "string" } },
  });
  assert.deepEqual(
    { ...first.sent[2], at: undefined },
    { type: "suspend", step: "approve", reason: "ship it?", at: undefined },
  );
  // A resume: the same decisions again, then the answer.
  n = 0;
  const answered = [{ step: "approve", tool: "human.ask", attempt: 1, outcome: "answered", value: "yes" }];
  const again = await drive(p, {}, (reply) => (n++ === 0 ? asked(reply) : answered));
  assert.deepEqual(again.sent.at(-1), { type: "done", output: { approved: "yes" } });
});

test("now and random read the recorded clock and seed", async () => {
  const p = agent({ name: "t" }, async (ctx) => {
    const when = await ctx.now();
    const r = await ctx.random();
    return [when.toISOString(), r];
  });
  const out = { "clock.wall": { unix_ms: 0 }, "random.int": { value: 2 ** 52 } };
  const { sent } = await drive(p, {}, returning(out));
  assert.deepEqual(sent[2].calls[0], {
    step: "random.int#1",
    tool: "random.int",
    input: { min: 0, max: 2 ** 53 - 1 },
  });
  assert.deepEqual(sent.at(-1).output, ["1970-01-01T00:00:00.000Z", 0.5]);
});

test("chat gives the model's text, or its parsed JSON with a schema", async () => {
  const p = agent({ name: "c" }, async (ctx) => {
    const text = await ctx.chat("fast", [{ role: "user", content: "hi" }], { step: "a" });
    const parsed = await ctx.chat("fast", [], { schema: { type: "object" } });
    return [text, parsed];
  });
  const out = { "llm.chat": { content: "hello", parsed: { ok: true } } };
  const { sent } = await drive(p, {}, returning(out));
  assert.deepEqual(sent[1].calls[0].input, {
    model: "fast",
    messages: [{ role: "user", content: "hi" }],
  });
  assert.equal(sent[2].calls[0].step, "llm.chat#2");
  assert.deepEqual(sent.at(-1).output, ["hello", { ok: true }]);
});

test("a denied call throws CallDenied, and a throw is a fail naming it", async () => {
  let caught = null;
  const p = agent({ name: "d" }, async (ctx) => {
    try {
      await ctx.call("fs.read", { path: "secret.txt" });
    } catch (e) {
      caught = e;
      throw e;
    }
  });
  const denied = (reply) => [
    { step: reply.calls[0].step, tool: "fs.read", attempt: 1, outcome: "denied", capability: "fs:read:secret.txt", reason: "no grant" },
  ];
  const { sent } = await drive(p, {}, denied);
  assert.ok(caught instanceof CallDenied);
  assert.equal(caught.capability, "fs:read:secret.txt");
  assert.equal(sent.at(-1).type, "fail");
  assert.ok(sent.at(-1).reason.startsWith("CallDenied: step `fs.read#1`"), sent.at(-1).reason);
});

test("a program that returns nothing is done with null", async () => {
  const { sent } = await drive(agent({ name: "n" }, async () => {}), {}, () => []);
  assert.deepEqual(sent.at(-1), { type: "done", output: null });
});

test("programFiles follows relative imports, not packages or files outside the root", () => {
  const root = mkdtempSync(join(tmpdir(), "oracle-agent-"));
  mkdirSync(join(root, "lib"));
  mkdirSync(join(root, "node_modules/dep"), { recursive: true });
  writeFileSync(
    join(root, "agent.mjs"),
    'import { a } from "./lib/a.mjs";\nimport {\n  b,\n} from "./lib/b.js";\nimport "node:fs";\nimport x from "dep";\nconst c = await import("./lib/c.mjs");\n',
  );
  writeFileSync(join(root, "lib/a.mjs"), 'export * from "./b.js";\nexport const a = 1;\n');
  writeFileSync(join(root, "lib/b.js"), 'import "../../outside.mjs";\nexport const b = 2;\n');
  writeFileSync(join(root, "lib/c.mjs"), 'const d = require("./d.cjs");\nexport const c = 3;\n');
  writeFileSync(join(root, "lib/d.cjs"), "module.exports = 5;\n");
  writeFileSync(join(root, "lib/unused.mjs"), "export const u = 4;\n");
  assert.deepEqual(programFiles("agent.mjs", root), [
    "agent.mjs",
    "lib/a.mjs",
    "lib/b.js",
    "lib/c.mjs",
    "lib/d.cjs",
  ]);
});

test("main speaks on stdout alone: the program's prints go to stderr", async () => {
  const root = mkdtempSync(join(tmpdir(), "oracle-agent-"));
  mkdirSync(join(root, "node_modules"));
  symlinkSync(SDK, join(root, "node_modules/oracle-agent"));
  writeFileSync(join(root, "helper.mjs"), "export const greet = (n) => `hi ${n}`;\n");
  writeFileSync(
    join(root, "agent.mjs"),
    [
      'import { agent } from "oracle-agent";',
      'import { greet } from "./helper.mjs";',
      'const p = agent({ name: "hi", inputs: { who: "string" } }, async (ctx, { who }) => {',
      "  console.log('a print');",
      "  return greet(who);",
      "});",
      "p.main();",
      "",
    ].join("\n"),
  );
  const child = spawn(process.execPath, ["agent.mjs"], {
    cwd: root,
    env: { ...process.env, ORACLE_AGENT_PROTOCOL: "1" },
  });
  let out = "";
  let err = "";
  child.stdout.on("data", (d) => {
    out += d;
  });
  child.stderr.on("data", (d) => {
    err += d;
  });
  child.stdin.write('{"type":"start","inputs":{"who":"ann"}}\n{"type":"decide","round":0,"observations":[]}\n');
  const code = await new Promise((done) => child.on("exit", done));
  assert.equal(code, 0, err);
  const lines = out.trim().split("\n").map((l) => JSON.parse(l));
  assert.deepEqual(lines[0].files, ["agent.mjs", "helper.mjs"]);
  assert.deepEqual(lines[1], { type: "done", output: "hi ann" });
  assert.ok(err.includes("a print"), err);
});
