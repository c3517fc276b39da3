"""`python -m topics.ladder.docs FILE`: the pass-over-n-rows table docs/measurements.md prints, generated from a
ladder's JSON (a recording in assets/, or `python -m engine ladder --json`), so the docs say what the captions say."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def table(path: str) -> str:
    from topics.ladder.curve_draw import docs_table
    from topics.ladder.record import Ladder

    lad = Ladder.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
    curve = next((r.curve for r in lad.rungs if r.curve), None)
    if curve is None:
        return f"{path}: no pass over n rows in this ladder"
    return docs_table(curve, lad.roof, lad.device)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(table(name))
        print()
