"""`python -m engine ...`: the command line, which sits above the core (commands/main.py)."""
from commands.main import main

raise SystemExit(main())
