"""A small MCP test server (stdio by default, streamable HTTP with ``--http PORT``).

$ECHO_START_DELAY (seconds) makes it wait that long before it answers anything, ``initialize``
included: a slow server at start. $ECHO_STARTS names a file each start appends its pid to.

Tools: echo, add, fail (isError), picture (image content), big (large text), sleep,
note (appends a line to a file, a side effect to count), crash (kills its own process),
break_server (kills it and makes restarts fail while the file named by $ECHO_FLAG exists),
add_tool (adds a tool and sends tools/list_changed),
env (reads an environment variable), pid (the server's process id), cwd (its working folder).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
import time

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

mcp = MCPServer("echo-test")

# A 1x1 PNG.
_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@mcp.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@mcp.tool()
def add(a: int, b: int = 2) -> int:
    """Add two integers."""
    return a + b


@mcp.tool()
def fail(reason: str) -> str:
    """Always fail with the given reason."""
    raise ToolError(f"failed on purpose: {reason}")


@mcp.tool()
def picture() -> list:
    """Return a caption and a tiny PNG image."""
    return ["a tiny picture", Image(data=_PNG, format="png")]


@mcp.tool()
def big(n: int) -> str:
    """Return n lines of text."""
    return "\n".join(f"line {i} of the big output" for i in range(n))


@mcp.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    print(f"echo_server: sleeping {seconds}", file=sys.stderr, flush=True)  # tests wait on it
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


def _append(path: str, text: str) -> None:
    with open(path, "a") as f:
        f.write(text + "\n")


@mcp.tool()
async def note(path: str, text: str, seconds: float = 0, lines: int = 0) -> str:
    """A side effect: append `text` as a line to the file `path`, sleep, then answer with
    `text` and `lines` lines of filler."""
    await asyncio.to_thread(_append, path, text)
    await asyncio.sleep(seconds)
    return "\n".join([text, *(f"filler line {i} of the answer" for i in range(lines))])


@mcp.tool()
def crash() -> str:
    """Kill this server process without answering."""
    sys.stdout.flush()
    os._exit(3)


@mcp.tool()
def break_server() -> str:
    """Create the $ECHO_FLAG file (so restarts fail) and kill this server process."""
    with open(os.environ["ECHO_FLAG"], "w") as f:
        f.write("broken")
    os._exit(3)


@mcp.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@mcp.tool()
def cwd() -> str:
    """The server's working directory."""
    return os.getcwd()


@mcp.tool()
def env(name: str) -> str:
    """The value of an environment variable, or '<unset>'."""
    return os.environ.get(name, "<unset>")


@mcp.tool()
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header (streamable HTTP only), or '<unset>'."""
    headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
    return headers.get(name.lower(), "<unset>")


@mcp.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Add a new tool called `name` and notify the client."""

    def extra() -> str:
        return f"I am {name}"

    mcp.add_tool(extra, name=name, description=f"Dynamically added tool {name}.")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


def main() -> None:
    flag = os.environ.get("ECHO_FLAG")
    if flag and os.path.exists(flag):
        sys.stderr.write("echo_server: broken on purpose\n")
        sys.exit(1)
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on PORT")
    args = parser.parse_args()
    if os.environ.get("ECHO_STARTS"):
        with open(os.environ["ECHO_STARTS"], "a") as f:
            f.write(f"{os.getpid()}\n")
    time.sleep(float(os.environ.get("ECHO_START_DELAY") or 0))
    if args.http is not None:
        mcp.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        mcp.run()


if __name__ == "__main__":
    main()
