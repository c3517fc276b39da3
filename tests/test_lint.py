"""The house lint: `python -m ruff check .` with the repository's ruff.toml finds nothing.

Undefined names, unused imports, a name shadowed by a loop, imports out of order: each is something a reader
trips on, and an undefined name is a crash waiting for the branch that reaches it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing_in_the_repository():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_lint_is_the_pinned_one_with_the_house_rules():
    """requirements-dev.txt pins the ruff the rules were written for; ruff.toml selects pyflakes' checks among them."""
    pinned = [line.split("#")[0].strip() for line in (ROOT / "requirements-dev.txt").read_text().splitlines()]
    assert any(p.startswith("ruff==") for p in pinned), pinned
    config = (ROOT / "ruff.toml").read_text()
    assert '"F"' in config and "line-length = 120" in config
