"""CI runs exactly the README's test command, after installing what the README's test line installs: a newcomer's
two commands are CI's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_exactly_the_readmes_test_command_after_its_install():
    block = re.search(r"## Install, run, test\s+```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    lines = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    install, _, test = lines[1].partition(" && ")
    assert install == "pip install -r requirements-dev.txt" and test.startswith("python -m pytest"), lines[1]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.strip().startswith("#")]
    assert "python3 -m pip install -q -r requirements-dev.txt" in ci
    assert ci[-1] == test.replace("python -m", "python3 -m"), (ci[-1], test)
    assert "-r requirements.txt" in (ROOT / "requirements-dev.txt").read_text()  # the app's own come first
