// oracle-agent: write an oracle code agent as an ordinary async function.
//
// The runtime starts the program's process (`node agent.mjs`) and speaks the agent protocol
// (docs/AGENTS.md, version 1) over its stdin and stdout; this module speaks the other side.
// Every effect is a call the runtime gates, executes and records; the program only decides.
// A resume or replay runs the program again from the start in a fresh process, given the
// recorded outcomes in order, so it may read nothing but its inputs and what its calls
// return (`ctx.now()` and `ctx.random()` instead of `Date` and `Math.random`).

import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { programFiles } from "./files.js";

export { programFiles } from "./files.js";

export const PROTOCOL = 1;
export const SDK_NAME = "oracle-agent";
export const SDK_VERSION = "0.1.0";

/** `random.int`'s range for `ctx.random()`: 53 bits, every one exactly a double's mantissa. */
const RANDOM_BITS = 53;
const RANDOM_SPAN = 2 ** RANDOM_BITS;

/** Stack frames kept when looking for the program's line: enough to get past this SDK's own. */
const STACK_FRAMES = 64;

/** JSON Schema types of the `inputs` shorthand (`{path: "string"}`). */
const SCHEMA_TYPES = new Set(["string", "integer", "number", "boolean", "object", "array"]);

/** The runtime said something this SDK cannot follow (a protocol error). */
export class AgentError extends Error {
  constructor(message) {
    super(message);
    this.name = "AgentError";
  }
}

/** A call's tool failed (`failed` outcome): `step` and the tool's `error`. */
export class CallFailed extends Error {
  constructor(step, error) {
    super(`step \`${step}\` failed: ${error}`);
    this.name = "CallFailed";
    this.step = step;
    this.error = error;
  }
}

/** No grant covers a call (`denied` outcome): the tool was not run. */
export class CallDenied extends Error {
  constructor(step, capability, reason) {
    super(`step \`${step}\` was denied \`${capability}\`: ${reason}`);
    this.name = "CallDenied";
    this.step = step;
    this.capability = capability;
    this.reason = reason;
  }
}

/** A call not yet made, for `ctx.gather`. */
export function pending(tool, args = {}, options = {}) {
  return { tool, args, step: options.step };
}

/**
 * The protocol's two streams: JSON lines read from `input` (a readable stream) and written with
 * `write`. When `input` ends, every waiting read stays unanswered and `closed` resolves: the
 * runtime closed stdin (a suspended run, or a replay that has read enough).
 */
class Channel {
  constructor(input, write) {
    this.write = write;
    this.buffer = "";
    this.lines = [];
    this.waiting = null;
    this.closed = new Promise((done) => {
      this.close = done;
    });
    input.setEncoding?.("utf8");
    input.on("data", (chunk) => this.take(String(chunk)));
    input.on("end", () => this.close());
    input.on("close", () => this.close());
  }

  take(chunk) {
    this.buffer += chunk;
    let at;
    while ((at = this.buffer.indexOf("\n")) >= 0) {
      this.lines.push(this.buffer.slice(0, at));
      this.buffer = this.buffer.slice(at + 1);
    }
    this.deliver();
  }

  deliver() {
    if (this.waiting !== null && this.lines.length > 0) {
      const w = this.waiting;
      this.waiting = null;
      w(this.lines.shift());
    }
  }

  send(message) {
    this.write(`${JSON.stringify(message)}\n`);
  }

  /** The next message, which must be of `kind`; never settles once the runtime closed. */
  async receive(kind) {
    const line = await new Promise((got) => {
      this.waiting = got;
      this.deliver();
    });
    let message;
    try {
      message = JSON.parse(line);
    } catch {
      throw new AgentError(`expected a \`${kind}\` message, got ${line.slice(0, 200)}`);
    }
    if (message === null || typeof message !== "object" || message.type !== kind) {
      throw new AgentError(`expected a \`${kind}\` message, got ${line.slice(0, 200)}`);
    }
    return message;
  }
}

/** The innermost frame of `stack` in one of the program's `files`: `{file, line}` or null. */
export function siteIn(stack, files, root = process.cwd()) {
  for (const text of String(stack ?? "").split("\n")) {
    const m = /(file:\/\/[^\s)]+):(\d+):\d+\)?\s*$/.exec(text);
    if (m === null) continue;
    let path;
    try {
      path = fileURLToPath(m[1]);
    } catch {
      continue;
    }
    const rel = path.startsWith(resolve(root) + "/") ? path.slice(resolve(root).length + 1) : null;
    if (rel !== null && (files.length === 0 || files.includes(rel))) {
      return { file: rel, line: Number(m[2]) };
    }
  }
  return null;
}

/** The stack where this is called, with more frames than Node keeps by default. */
function stackHere() {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = STACK_FRAMES;
  const stack = new Error().stack;
  Error.stackTraceLimit = limit;
  return stack;
}

/** What a program calls: each method is one or more tool calls the runtime records. */
export class Context {
  constructor(channel, files) {
    this._channel = channel;
    this._files = files;
    this._counts = new Map();
  }

  /** The step of the next call of `tool`: `step`, or `TOOL#N` for its N-th call. */
  _step(tool, step) {
    const n = (this._counts.get(tool) ?? 0) + 1;
    this._counts.set(tool, n);
    return step ?? `${tool}#${n}`;
  }

  async _round(reply, site) {
    if (site !== null) reply.at = site;
    this._channel.send(reply);
    const decide = await this._channel.receive("decide");
    if (!Array.isArray(decide.observations)) {
      throw new AgentError("a `decide` without `observations`");
    }
    return decide.observations;
  }

  async _outcome(seen, site) {
    const step = String(seen.step);
    switch (seen.outcome) {
      case "returned":
        return seen.output;
      case "answered":
        return seen.value;
      case "failed":
        throw new CallFailed(step, String(seen.error));
      case "denied":
        throw new CallDenied(step, String(seen.capability), String(seen.reason));
      case "ask": {
        // A person must answer: the run suspends; a resume shows the answer.
        const reply = { type: "suspend", step, reason: seen.question };
        const again = await this._round(reply, site);
        if (again.length !== 1) {
          throw new AgentError(`step \`${step}\`: expected its answer after suspending`);
        }
        return this._outcome(again[0], site);
      }
      default:
        throw new AgentError(`step \`${step}\`: unknown outcome ${JSON.stringify(seen.outcome)}`);
    }
  }

  /** Makes `calls` (from `pending`) in one decision and gives their outputs in order; the
   * first that failed or was denied throws. */
  gather(...calls) {
    const site = siteIn(stackHere(), this._files);
    const wire = calls.map((c) => ({
      step: this._step(c.tool, c.step),
      tool: c.tool,
      input: c.args ?? {},
    }));
    return this._gather(wire, site);
  }

  async _gather(wire, site) {
    const seen = await this._round({ type: "calls", calls: wire }, site);
    if (seen.length !== wire.length) {
      throw new AgentError(`${wire.length} calls made, ${seen.length} outcomes shown`);
    }
    const outputs = [];
    for (const s of seen) outputs.push(await this._outcome(s, site));
    return outputs;
  }

  /** Calls `tool` (built in or declared) with `args`: its output. */
  async call(tool, args = {}, options = {}) {
    const [output] = await this.gather(pending(tool, args, options));
    return output;
  }

  /** One `llm.chat` of the model bound to `model`: its text (its parsed JSON when `schema` is
   * given). */
  async chat(model, messages, options = {}) {
    const { step, ...args } = options;
    const out = await this.call("llm.chat", { model, messages, ...args }, { step });
    if ("schema" in args) return out.parsed ?? out.content;
    return out.content;
  }

  /** Asks a person (`human.ask`): the run suspends until `oracle resume RUN --step STEP
   * --value V` answers, then this gives V. */
  async ask(question, options = {}) {
    const args = { question };
    if (options.schema !== undefined) args.schema = options.schema;
    return this.call("human.ask", args, { step: options.step });
  }

  /** The wall clock, read once by the runtime and recorded (`clock.wall`). */
  async now(options = {}) {
    const out = await this.call("clock.wall", {}, { step: options.step });
    return new Date(Number(out.unix_ms));
  }

  /** A number in [0, 1) drawn from the run's recorded seed (`random.int`). */
  async random(options = {}) {
    const args = { min: 0, max: RANDOM_SPAN - 1 };
    const out = await this.call("random.int", args, { step: options.step });
    return Number(out.value) / RANDOM_SPAN;
  }

  /** Waits on a durable timer (the `sleep` tool): `duration` as a plan's `for` ("10m"), or
   * `{ until }` an RFC 3339 instant in the options, exactly one. The run suspends; when the
   * timer is woken this gives `{due, due_ms, fired, fired_ms}`, recorded. */
  async sleep(duration, options = {}) {
    const { step, until } = options;
    if ((duration === undefined) === (until === undefined)) {
      throw new TypeError("sleep takes a duration or { until }, exactly one");
    }
    const args = duration !== undefined ? { for: duration } : { until };
    return this.call("sleep", args, { step });
  }

  /** The run's belief memory (docs/MEMORY.md): `claim`, `query`, `history`. */
  get memory() {
    const call = (tool, args, options = {}) => this.call(tool, args, { step: options.step });
    return {
      claim: (claim, options) => call("memory.assert", claim, options),
      query: (line, options) => call("memory.query", line, options),
      history: (about, options) => call("memory.history", about, options),
    };
  }
}

/** The `inputs` option as a JSON Schema: a schema as given, or the shorthand `{name: TYPE}` or
 * `{name: SCHEMA}` (every input optional: defaults are the function's). */
function inputsSchema(inputs) {
  if (inputs === undefined) return { type: "object", properties: {}, required: [] };
  if (inputs.type === "object") return inputs;
  const properties = {};
  for (const [name, ty] of Object.entries(inputs)) {
    properties[name] = SCHEMA_TYPES.has(ty) ? { type: ty } : typeof ty === "object" ? ty : {};
  }
  return { type: "object", properties, required: [] };
}

/** The reason of a `fail`: `Name: message`, as the Python SDK's `Type: message`. */
function reasonOf(e) {
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  return `thrown: ${String(e)}`;
}

/** A function made an agent by `agent`: `main()` serves the protocol. */
export class Program {
  constructor(options, fn) {
    this.fn = fn;
    this.name = options.name;
    this.version = options.version ?? 1;
    this.grants = [...(options.grants ?? [])];
    this.inputs = inputsSchema(options.inputs);
  }

  hello(files) {
    return {
      type: "hello",
      protocol: PROTOCOL,
      sdk: { name: SDK_NAME, version: SDK_VERSION },
      program: { name: this.name, version: this.version },
      grants: this.grants,
      inputs: this.inputs,
      files,
    };
  }

  /** Speaks the protocol over `input` (a readable stream) and `write` until the program
   * returns or throws, or the runtime closes `input`. */
  async serve(input, write, files) {
    const channel = new Channel(input, write);
    const closed = channel.closed.then(() => "closed");
    channel.send(this.hello(files));
    const talk = (async () => {
      const start = await channel.receive("start");
      await channel.receive("decide");
      const ctx = new Context(channel, files);
      try {
        const output = await this.fn(ctx, start.inputs ?? {});
        channel.send({ type: "done", output: output === undefined ? null : output });
      } catch (e) {
        const reply = { type: "fail", reason: reasonOf(e) };
        const site = siteIn(e?.stack, files);
        if (site !== null) reply.at = site;
        channel.send(reply);
      }
      return "finished";
    })();
    return Promise.race([talk, closed]);
  }

  /** Serves the protocol on stdin and stdout; the program's prints go to stderr. */
  async main() {
    const out = process.stdout.write.bind(process.stdout);
    process.stdout.write = process.stderr.write.bind(process.stderr);
    const entry = process.argv[1] ?? "";
    if (process.env.ORACLE_AGENT_PROTOCOL === undefined) {
      process.stderr.write(`${this.name}: an oracle agent; run it with \`oracle run ${entry}\`\n`);
    }
    await this.serve(process.stdin, out, programFiles(entry));
    // Done, failed or closed: nothing more is read, so stdin must not keep the process alive.
    process.stdin.destroy();
  }
}

/** Makes `fn(ctx, inputs)` an agent named `options.name` at `options.version`, which declares
 * `options.grants` (capabilities, as a plan's `grants`) and `options.inputs` (a JSON Schema,
 * or `{name: TYPE}`). */
export function agent(options, fn) {
  return new Program(options, fn);
}

/** The verdicts docs/MEMORY.md defines. */
const VERDICTS = new Set(["affirm", "deny", "unknown"]);

/** A decision on an adjudication request: `affirm` makes the challenger the belief, `deny`
 * keeps the incumbent, `unknown` leaves both contested; `evidence` is its provenance and
 * `note` (at most 4 KiB) is recorded with it. */
export function verdict(word, options = {}) {
  if (!VERDICTS.has(word)) {
    throw new TypeError(`verdict ${JSON.stringify(word)}: expected one of affirm, deny, unknown`);
  }
  return {
    verdict: word,
    evidence: options.evidence ?? "external_first_hand",
    note: options.note ?? "",
  };
}

/** A function from a request to a verdict, run as an `--oracle-cmd` program: the runtime starts
 * it once per pending request, the request as one JSON line on stdin; what it prints on stdout
 * is its verdict, recorded as `oracle adjudicate` records one (docs/MEMORY.md, "The adjudication
 * oracle"). Returning `null` leaves the request to a person. */
export class Adjudicator {
  constructor(fn) {
    this.fn = fn;
  }

  /** Decides `request` (`run`, `handle`, `subject`, `predicate`, `incumbent`, `challenger`,
   * ...): a verdict, or `null`. */
  async request(request) {
    const decided = await this.fn(request);
    if (decided !== null && decided !== undefined && !VERDICTS.has(decided?.verdict)) {
      throw new TypeError("an adjudicator returns verdict(...) or null");
    }
    return decided ?? null;
  }

  /** Reads one request from stdin and prints the verdict, if any, on stdout; the function's
   * own prints go to stderr. */
  async main() {
    const out = process.stdout.write.bind(process.stdout);
    process.stdout.write = process.stderr.write.bind(process.stderr);
    let text = "";
    for await (const chunk of process.stdin) text += chunk;
    const decided = await this.request(JSON.parse(text.split("\n")[0]));
    if (decided !== null) out(`${JSON.stringify(decided)}\n`);
  }
}

/** Makes `fn(request)` an adjudicator; call `.main()` in the program. */
export function adjudicator(fn) {
  return new Adjudicator(fn);
}
