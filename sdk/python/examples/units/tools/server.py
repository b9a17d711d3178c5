"""An MCP server written in Python with the official SDK (FastMCP), declared to oracle as the
tool server `units` (tools/units.toml): its tool becomes `mcp.units.convert`.

oracle starts it over stdio with an empty environment (docs/TOOLS.md), pins this file's bytes
in the run's first event, records every call, and never starts it on replay. Outputs hold
integers only: a float has no canonical encoding in a log (docs/FORMAT.md, "Values").
"""

from typing import TypedDict

from mcp.server.fastmcp import FastMCP

server = FastMCP("units")


class Converted(TypedDict):
    """A temperature in tenths of a degree, so it stays an integer."""

    celsius_tenths: int
    fahrenheit_tenths: int


@server.tool()
def convert(celsius_tenths: int) -> Converted:
    """Converts a temperature given in tenths of a degree Celsius to tenths of a degree
    Fahrenheit (rounded towards negative infinity)."""
    return {
        "celsius_tenths": celsius_tenths,
        "fahrenheit_tenths": celsius_tenths * 9 // 5 + 320,
    }


if __name__ == "__main__":
    server.run("stdio")
