"""`python -m engine ...` is another name for `python -m commands ...`, the command line.

The command line sits above the core (commands/: it reaches every topic and the benchmarks), so the core never
imports it. This file imports nothing: it replaces its own process with `python -m commands` and the same
arguments, as a shell alias would."""
import os
import sys

os.execv(sys.executable, [sys.executable, "-m", "commands", *sys.argv[1:]])
