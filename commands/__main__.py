"""`python -m commands ...` (and `python -m engine ...`, which forwards here): the command line."""
from commands.main import main

raise SystemExit(main())
