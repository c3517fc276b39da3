"""Readable on a projector (1280x720, presenter mode) and on a phone (390x844): what a picture or a table shows on its
first screen, checked from the record that draws it (#35, items 10-14). The browser's view of the same claims is in
tests/test_browser_readable.py."""

from __future__ import annotations

import json
from pathlib import Path

from topics.ladder.record import Ladder

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------- the ladder's table (item 10)

STORY = ["size", "weights", "prefill ms (min–max)", "prefill is (× its bound)", "decode ms (min–max)",
         "decode is (× its bound)", "decode ÷ prefill per token", "cache saves ×"]


def recorded() -> Ladder:
    return Ladder.from_dict(json.loads((ROOT / "assets" / "ladder_cpu.json").read_text()))


def cell_px(text: str) -> float:
    """About how wide a dataframe cell is at 1280 px in presenter mode: ~7 px a character (Source Sans at 14 px, measured) and 17 px of padding."""
    return 7.0 * len(text) + 17


def test_the_ladder_tables_first_columns_tell_prefill_and_decode_and_fit_a_projector():
    table = recorded().frame()
    assert list(table.columns[: len(STORY)]) == STORY  # each pass's time, then what bounds it, side by side
    widths = [max(cell_px(str(c)), *(cell_px(str(v)) for v in table[c])) for c in STORY]
    assert sum(widths) <= 1226  # the dataframe's width at 1280x720 (padding and borders apart): no sideways scroll
    for v in table["decode is (× its bound)"]:
        assert v.split(" ×")[0] in {"compute-bound", "memory-bound", "compute side", "memory side", "overhead-bound"}


def test_the_ladder_table_loses_no_number_when_its_verdicts_are_shortened():
    lad = recorded()
    table = lad.frame()
    for r, (_, row) in zip(lad.rungs, table.iterrows()):
        assert row["prefill is (× its bound)"] == f"{r.prefill.kind} ×{r.prefill.ratio:.2f}"
        assert (row["prefill, in words"], row["decode, in words"], row["no-cache decode, in words"]) == (
            r.prefill.label, r.decode.label, r.nocache.label)  # the whole sentence, to the right
        assert row["parameters"] == r.parameters and row["decode memory bound ms"] == round(r.decode.memory_ms, 3)
        assert row["prefill compute bound ms"] == round(r.prefill.compute_ms, 3)
