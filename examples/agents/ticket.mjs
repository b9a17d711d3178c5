// The same agent in TypeScript's SDK (sdk/typescript, plain ES modules): `oracle run
// examples/agents/ticket.mjs` runs it with `node` (README.md, docs/AGENTS.md).

import { agent } from "oracle-agent";

const ticket = agent(
  { name: "ticket", version: 1, grants: ["fs:read:fixtures/data/**"], inputs: { path: "string" } },
  async (ctx, { path = "fixtures/data/notes.txt" }) => {
    const { text } = await ctx.call("fs.read", { path }, { step: "read" });
    const { words } = await ctx.call("text.count", { text });
    const question = `reply to a ${words}-word note?`;
    const ok = await ctx.ask(question, { schema: { type: "string" }, step: "approve" });
    return { words, approved: ok };
  },
);

ticket.main();
