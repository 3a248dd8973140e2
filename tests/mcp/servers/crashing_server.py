"""An MCP 'server' that exits at once with an error, before any handshake."""

import sys

sys.stderr.write("crashing_server: giving up immediately\n")
sys.exit(1)
