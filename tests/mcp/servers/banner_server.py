"""The echo server, after one stray banner line on stdout (a common slip): still usable."""

import runpy
import sys
from pathlib import Path

sys.stdout.write("echo server v1 starting (this line should have gone to stderr)\n")
sys.stdout.flush()
runpy.run_path(str(Path(__file__).with_name("echo_server.py")), run_name="__main__")
