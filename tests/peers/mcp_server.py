"""An MCP server on the official Python SDK (`mcp` on PyPI), for systole's tests.

Tools: `search` (read-only), `unread` (read-only: "0" for the folder "quiet"), `archive` (writes a line to EFFECTS_FILE: an external
effect the tests count), `slow` (sleeps), `hang` (never answers), `crash` (the process
exits mid-call), `flood` (a result of many megabytes), `echo_env` (the value of a
variable), `add_tool` (adds a tool and says the list changed).

    python3 mcp_server.py stdio
    python3 mcp_server.py http PORT_FILE     # binds 127.0.0.1:0, writes the port to PORT_FILE

With `--stderr-flood`, it writes 10,000 lines (about 300 KB, past any pipe's buffer) to
stderr before it serves: a client that does not drain stderr would hang it.
"""

import asyncio
import os
import socket
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("systole-test-peer")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def search(query: str) -> str:
    """Search the inbox; returns the matching subjects."""
    return f"3 messages match {query!r}: invoice overdue, server down, lunch"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def unread(folder: str) -> str:
    """The unread messages of a folder: "0" when there are none."""
    if folder == "quiet":
        return "0"
    return f"2 unread in {folder}: invoice overdue, server down"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def archive(message: str) -> str:
    """Archive a message (an external effect: it is written down)."""
    _effect(message)
    return f"archived {message}"


@server.tool()
async def slow(seconds: float) -> str:
    """Answers after `seconds`."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


def _effect(line: str) -> None:
    path = os.environ.get("EFFECTS_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as effects:
            effects.write(line + "\n")


@server.tool()
async def hang() -> str:
    """Never answers; a cancellation from the client is written down."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        _effect("hang cancelled")
        raise
    return "unreachable"


@server.tool()
def crash() -> str:
    """Exits the whole server in the middle of the call."""
    os._exit(3)


@server.tool()
def flood(megabytes: int) -> str:
    """A result of `megabytes` megabytes."""
    return "x" * (megabytes * 1024 * 1024)


@server.tool()
def echo_env(name: str) -> str:
    """The value of an environment variable, or <unset>."""
    return os.environ.get(name, "<unset>")


@server.tool()
async def add_tool(ctx: Context) -> str:
    """Adds a tool named `fresh` and tells the client its list changed."""

    @server.tool(name="fresh")
    def fresh() -> str:
        """A tool added at run time."""
        return "fresh"

    await ctx.session.send_tool_list_changed()
    return "added fresh"


def main() -> None:
    if "--stderr-flood" in sys.argv:
        for line in range(10_000):
            print(f"noise line {line} {os.environ.get('STDERR_SECRET', '')}", file=sys.stderr)
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run("stdio")
        return
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    with open(sys.argv[2], "w", encoding="utf-8") as port_file:
        port_file.write(str(sock.getsockname()[1]))
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
