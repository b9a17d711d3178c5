"""A code agent in Python (docs/AGENTS.md): reads a note, counts its words, asks a person to
approve. `PYTHONPATH=sdk/python/src oracle run examples/agents/ticket.py` (README.md)."""

from oracle_agent import agent


@agent(name="ticket", version=1, grants=["fs:read:fixtures/data/**"])
def ticket(ctx, path: str = "fixtures/data/notes.txt"):
    text = ctx.call("fs.read", path=path, step="read")["text"]
    words = ctx.call("text.count", text=text)["words"]
    ok = ctx.ask(f"reply to a {words}-word note?", schema={"type": "string"}, step="approve")
    return {"words": words, "approved": ok}


if __name__ == "__main__":
    ticket.main()
