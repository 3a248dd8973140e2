"""An MCP 'server' that writes garbage to stdout instead of JSON-RPC, and never answers.

It keeps its stdin open and goes on writing a line now and then, like a program that prints a
banner and log lines to stdout, as if it were a terminal.
"""

import sys
import time

for i in range(1000):
    sys.stdout.write(f"Server starting... {{not json: {i}}} \x00\xff\n")
    sys.stdout.flush()
    time.sleep(0.05)
