// Types of oracle-agent (index.js): the program side of the agent protocol (docs/AGENTS.md).

/** Any JSON value: what a tool takes and gives, and what a program returns. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export declare const PROTOCOL: 1;
export declare const SDK_NAME: "oracle-agent";
export declare const SDK_VERSION: string;

/** The runtime said something this SDK cannot follow (a protocol error). */
export declare class AgentError extends Error {}

/** A call's tool failed (`failed` outcome). */
export declare class CallFailed extends Error {
  constructor(step: string, error: string);
  readonly step: string;
  readonly error: string;
}

/** No grant covers a call (`denied` outcome): the tool was not run. */
export declare class CallDenied extends Error {
  constructor(step: string, capability: string, reason: string);
  readonly step: string;
  readonly capability: string;
  readonly reason: string;
}

/** Options of one call: its step name (default `TOOL#N`, the N-th call of that tool). */
export interface StepOptions {
  step?: string;
}

/** A call not yet made, for `ctx.gather`. */
export interface Pending {
  tool: string;
  args: { [key: string]: Json };
  step?: string;
}

export declare function pending(
  tool: string,
  args?: { [key: string]: Json },
  options?: StepOptions,
): Pending;

/** `ctx.chat`'s options: the step and any more `llm.chat` input (`schema`, ...). */
export interface ChatOptions extends StepOptions {
  schema?: Json;
  [key: string]: Json | undefined;
}

export interface AskOptions extends StepOptions {
  /** The JSON Schema the answer must meet. */
  schema?: Json;
}

/** What a program calls: each method is one or more tool calls the runtime records. */
export declare class Context {
  /** Calls `tool` (built in or declared) with `args`: its output. */
  call<T = any>(tool: string, args?: { [key: string]: Json }, options?: StepOptions): Promise<T>;
  /** Makes `calls` in one decision; their outputs in order (the first failure throws). */
  gather(...calls: Pending[]): Promise<any[]>;
  /** One `llm.chat` of the model bound to `model`: its text (its parsed JSON with `schema`). */
  chat<T = any>(
    model: string,
    messages: { role: string; content: string }[],
    options?: ChatOptions,
  ): Promise<T>;
  /** Asks a person (`human.ask`): the run suspends until it is answered. */
  ask<T = any>(question: string, options?: AskOptions): Promise<T>;
  /** The wall clock, read once by the runtime and recorded (`clock.wall`). */
  now(options?: StepOptions): Promise<Date>;
  /** A number in [0, 1) drawn from the run's recorded seed (`random.int`). */
  random(options?: StepOptions): Promise<number>;
  /** Waits on a durable timer (`sleep`): a duration ("10m") or `{ until }`, exactly one. */
  sleep(duration?: string, options?: SleepOptions): Promise<Slept>;
  /** The run's belief memory (docs/MEMORY.md). */
  readonly memory: Memory;
}

export interface SleepOptions extends StepOptions {
  /** An RFC 3339 instant to wait until, instead of a duration. */
  until?: string;
}

/** What a woken timer gives. */
export interface Slept {
  due: string;
  due_ms: number;
  fired: string;
  fired_ms: number;
}

/** The belief memory's tools; each argument object is the tool's input (docs/MEMORY.md). */
export interface Memory {
  /** Records a claim (`memory.assert`): subject, predicate, value, provenance, ... */
  claim<T = any>(claim: { [key: string]: Json }, options?: StepOptions): Promise<T>;
  /** What the memory believes about a line (`memory.query`): subject, predicate, ... */
  query<T = any>(line: { [key: string]: Json }, options?: StepOptions): Promise<T>;
  /** The claims about a subject (`memory.history`): subject, predicate?, as_of? */
  history<T = any>(about: { [key: string]: Json }, options?: StepOptions): Promise<T>;
}

/** An input's JSON Schema type, for the `inputs` shorthand. */
export type InputType = "string" | "integer" | "number" | "boolean" | "object" | "array";

export interface AgentOptions {
  /** 1 to 64 letters, digits, `_`, `.`, `-`: names the program and its runs (`NAME-N`). */
  name: string;
  version?: number;
  /** The capabilities the program declares, as a plan's `grants`. */
  grants?: string[];
  /** A JSON Schema of the inputs (`{type: "object", ...}`), or `{name: TYPE | SCHEMA}`. */
  inputs?: { [key: string]: Json };
}

export type AgentFn<I, O> = (ctx: Context, inputs: I) => Promise<O> | O;

/** What `serve` reads the runtime's lines from: a readable stream such as `process.stdin`. */
export interface LineSource {
  on(event: "data" | "end" | "close", listener: (chunk?: any) => void): unknown;
  setEncoding?(encoding: "utf8"): unknown;
}

/** A function made an agent by `agent`. */
export declare class Program<I = { [key: string]: Json }, O = Json> {
  readonly name: string;
  readonly version: number;
  readonly grants: string[];
  readonly inputs: { [key: string]: Json };
  /** The `hello` message for `files`. */
  hello(files: string[]): { [key: string]: Json };
  /** Speaks the protocol over `input` and `write` until the program ends or `input` closes. */
  serve(
    input: LineSource,
    write: (line: string) => unknown,
    files: string[],
  ): Promise<"finished" | "closed">;
  /** Serves the protocol on stdin and stdout; the program's prints go to stderr. */
  main(): Promise<void>;
}

export declare function agent<I = { [key: string]: Json }, O = Json>(
  options: AgentOptions,
  fn: AgentFn<I, O>,
): Program<I, O>;

/** The program's files: `entry` and the modules its relative imports reach, relative to
 * `root`, sorted. */
export declare function programFiles(entry: string, root?: string): string[];

/** The innermost frame of `stack` in one of `files`. */
export declare function siteIn(
  stack: string | undefined,
  files: string[],
  root?: string,
): { file: string; line: number } | null;

/** A decision on an adjudication request (docs/MEMORY.md). */
export interface Verdict {
  verdict: "affirm" | "deny" | "unknown";
  evidence: string;
  note: string;
}

/** A verdict: `affirm`, `deny` or `unknown`, with its evidence (default
 * `external_first_hand`) and a note. */
export declare function verdict(
  word: "affirm" | "deny" | "unknown",
  options?: { evidence?: string; note?: string },
): Verdict;

/** A function from a request to a verdict (or `null`: a person decides), run as an
 * `--oracle-cmd` program. */
export declare class Adjudicator {
  constructor(fn: (request: { [key: string]: Json }) => Verdict | null | Promise<Verdict | null>);
  /** Decides `request`. */
  request(request: { [key: string]: Json }): Promise<Verdict | null>;
  /** Reads one request from stdin and prints the verdict, if any, on stdout. */
  main(): Promise<void>;
}

/** Makes `fn(request)` an adjudicator. */
export declare function adjudicator(
  fn: (request: { [key: string]: Json }) => Verdict | null | Promise<Verdict | null>,
): Adjudicator;
