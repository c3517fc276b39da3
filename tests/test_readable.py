"""Readable on a projector (1280x720, presenter mode) and on a phone (390x844): what a picture or a table shows on its
first screen, checked from the record that draws it. The browser's view of the same claims is in
tests/test_browser_readable.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from topics.ladder.record import Ladder

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------- the ladder's table

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


# ---------------------------------------------------------------- the stage

LILY = "One day, a little girl named Lily went to the park with her dog."  # 17 positions: tilted column labels
LONG = ("Once upon a time, in a small house near the woods, there lived a little boy named Sam. Sam loved to explore. "
        "Every morning he put on his green hat and walked to the river to look for frogs.")  # too many to label


def stage_of(lm, prompt: str, decodes: int = 1, **token) -> str:
    from dataclasses import replace

    from drawing.stage import stage_svg
    from engine import Stepper

    s = Stepper(lm, prompt, max_new_tokens=decodes + 2)
    s.prefill()
    for _ in range(decodes):
        s.decode()
    return stage_svg(replace(s.records[-1], **token), s.pieces(), s.prompt_len)


def texts(svg: str) -> list[dict]:
    """Every <text>: its x, size, anchor, transform and words."""
    import re
    from html import unescape

    out = []
    for attrs, words in re.findall(r"<text ([^>]*)>([^<]*)</text>", svg):
        a = dict(re.findall(r'([\w-]+)="([^"]*)"', attrs))
        out.append({"x": float(a["x"]), "size": float(a["font-size"]), "anchor": a["text-anchor"],
                    "rotate": "rotate(" in a.get("transform", ""), "text": unescape(words)})
    return out


def test_the_loop_back_to_the_strip_runs_in_its_own_lane_clear_of_the_columns_and_keys_read(bundled_lm):
    """The dashed arrow from the chosen token to the strip ran over the last column's label and 'keys read'."""
    import math
    import re

    from drawing.svg import LOOP_X, MONO_EM

    for prompt in (LILY, LONG):
        svg = stage_of(bundled_lm, prompt)
        path = re.search(r'<path data-role="loop" d="([^"]*)"', svg).group(1)
        xs = [float(v) for v in re.findall(r"[-\d.]+", path)[::2]]
        assert max(xs) == LOOP_X and path.rstrip().split(" L ")[-1].startswith(f"{LOOP_X} ")  # straight up its lane
        for x, w in re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"[^>]*fill="(?:#1f77b4|#ff7f0e|url|rgb|#f4f4f4)',
                               svg):
            assert float(x) + float(w) < LOOP_X - 10  # every key column, K, V and scores
        for t in texts(svg):
            if t["rotate"]:  # a tilted column label reaches right by its length times cos 55°
                assert t["x"] + len(t["text"]) * MONO_EM * t["size"] * math.cos(math.radians(55)) < LOOP_X - 4
            if t["text"].startswith("keys read"):
                assert t["anchor"] == "end" and t["x"] < LOOP_X - 20


def test_a_short_next_token_and_its_id_sit_side_by_side_in_their_chip(bundled_lm):
    """'·a' was drawn over 'id 259'."""
    import re

    from drawing.svg import MONO_EM

    for token, token_id in ((" a", 259), (".", 14), ("!", 5)):
        svg = stage_of(bundled_lm, "Once upon a time", token=token, token_id=token_id)
        chip = re.search(r'<g data-role="chosen-chip">(.*?)</g>', svg).group(1)
        rect = re.search(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', chip)
        left, right = float(rect.group(1)), float(rect.group(1)) + float(rect.group(2))
        word, ident = texts(chip)
        assert ident["text"] == f"id {token_id}" and word["anchor"] == "start" and ident["anchor"] == "end"
        word_end = word["x"] + len(word["text"]) * MONO_EM * word["size"]
        id_start = ident["x"] - len(ident["text"]) * MONO_EM * ident["size"]
        assert left < word["x"] and word_end + 4 <= id_start and ident["x"] < right


# ---------------------------------------------------------------- colour and contrast


def test_the_kv_growth_chart_uses_only_the_palettes_meanings_and_greys(bundled_lm):
    """Its layers were drawn in the theme's red and pink: red means recomputed, and the two were hard to tell apart."""
    from drawing.kv import LAYER_GREYS, kv_growth_figure
    from drawing.palette import DECODE, PREFILL
    from engine import Stepper

    s = Stepper(bundled_lm, "Once upon a time", max_new_tokens=4)
    s.run()
    fig = kv_growth_figure(s.records)
    total, *layers = [tr for tr in fig.data if tr.x[0] is not None]  # the drawn lines (the rest are legend keys)
    assert list(total.marker.color) == [PREFILL] + [DECODE] * (len(s.records) - 1)  # who wrote that step's positions
    assert all(tr.line.color in LAYER_GREYS for tr in layers)
    assert [tr.name for tr in layers] == [f"each layer (all {len(s.records[-1].layers)} the same)"]  # not 4 lines on one
    keys = {tr.marker.color: tr.name for tr in fig.data if tr.x[0] is None}  # and the markers' colours are named
    assert "prefill" in keys[PREFILL] and "decode" in keys[DECODE]


def test_a_charts_text_is_dark_and_its_toolbar_keeps_two_buttons():
    """Small grey ticks faded on a projector, its legend stayed the theme's 13.5 px; the hover toolbar covered the
    chart's title."""
    import plotly.graph_objects as go

    from drawing.palette import INK, MODEBAR_REMOVES, TICK, layout

    fig = layout(go.Figure(go.Scatter(x=[0, 1], y=[1, 2])), "KV cache size after each step", scale=1.35)
    assert fig.layout.xaxis.tickfont.color == fig.layout.yaxis.tickfont.color == INK
    assert fig.layout.yaxis.tickfont.size == TICK * 1.35 and fig.layout.title.font.color == INK
    assert fig.layout.legend.font.size == TICK * 1.35  # a legend as large as the ticks it names, on a projector
    assert set(fig.layout.modebar.remove) == set(MODEBAR_REMOVES) and "toimage" not in MODEBAR_REMOVES


def test_a_caption_is_drawn_whole_not_at_streamlits_sixty_percent():
    from ui.style import COMPACT_CSS, PRESENTER_CSS

    assert '[data-testid="stCaptionContainer"] { opacity: 1;' in COMPACT_CSS
    assert '[data-testid="stCaptionContainer"] { color: #333; }' in PRESENTER_CSS


# ---------------------------------------------------------------- TTFT against TPOT, side by side


def call(ttft: float, tpot: float | None, n: int) -> dict:
    return {"ttft_ms": ttft, "tpot_ms": tpot, "prompt_tokens": n, "prefill_ms_per_token": ttft / n}


def test_the_ttft_sentence_says_each_clause_only_where_its_numbers_hold():
    from drawing.latency import LONG_PROMPT_SCENARIO, ttft_tpot_sentence

    short = ttft_tpot_sentence(call(6.0, 6.0, 5))  # the bundled model, a 5-token prompt: the two alike
    assert "×1.0 one decode step" in short and "TTFT ≈ TPOT here" in short and LONG_PROMPT_SCENARIO in short
    assert "a prompt token cost 1.20 ms, a generated one 6.00 ms (×5.0)" in short and "a decode step's one." in short
    long = ttft_tpot_sentence(call(40.0, 4.0, 136))  # a long prompt: parted, and per token the other way round
    assert "×10.0 one decode step" in long and "≈" not in long and LONG_PROMPT_SCENARIO not in long
    assert "a prompt token cost 0.29 ms, a generated one 4.00 ms (×13.6)" in long  # 4 / (40 / 136)
    off = ttft_tpot_sentence(call(6.0, 14.0, 5) | {"decode_rows": 25.0})  # the cache off: each step feeds them all
    assert "a pass over every position so far (25 rows, the median, against the prefill's 5)" in off
    assert "fixed costs" not in off and "a decode step's one" not in off  # not the cache-on reason
    half = ttft_tpot_sentence(call(6.0, 14.0, 5) | {"decode_rows": 8.5})  # an even count of steps: 8.5, not 8
    assert "(8.5 rows, the median" in half
    busy = ttft_tpot_sentence(call(2.0, 0.1, 5))  # a decode step measured faster than a prompt token's share
    assert "runs the other way" not in busy and "≈" not in busy
    assert ttft_tpot_sentence(call(5.0, None, 5)) is None  # no decode step yet: nothing to set beside TTFT


def test_a_scenario_parts_ttft_and_tpot_with_a_long_prompt_on_the_latency_view(bundled_lm):
    from drawing.latency import LONG_PROMPT_SCENARIO
    from engine import Stepper
    from ui.presets import SCENARIOS

    scenario = next(s for s in SCENARIOS if s["title"] == LONG_PROMPT_SCENARIO)
    assert scenario["view"] == "Latency" and scenario["link"]["cache"] == "on"
    s = Stepper(bundled_lm, scenario["link"]["prompt"], max_new_tokens=2)
    s.prefill()
    assert s.records[0].q_len >= 128 and f"A {s.records[0].q_len}-token prompt" in scenario["why"]


def test_the_latency_views_metrics_fit_three_across():
    from drawing.views import ms3

    assert [ms3(x) for x in (1234.5, 106.1, 10.55, 7.237, 0.375, 0.0123)] == ["1234", "106", "10.6", "7.24", "0.38",
                                                                              "0.012"]


def test_a_prompt_tokens_cost_is_the_ttft_shown_beside_it_over_the_prompt():
    """The Latency view showed TTFT 5.78 ms for 5 tokens and "a prompt token cost 1.13 ms": the forward pass alone
    over 5, beside a TTFT that counts the whole step. Both now come from the step's whole time; the rows a decode
    step fed are the ones its records say (1 with the cache, every position without it)."""
    from types import SimpleNamespace

    from drawing.latency import timing_callout

    def step(phase, latency, forward, q_len):
        return SimpleNamespace(phase=phase, latency_ms=latency, forward_ms=forward, q_len=q_len)

    on = timing_callout([step("prefill", 5.78, 5.65, 5)] + [step("decode", 2.79, 2.7, 1)] * 3)
    assert on["ttft_ms"] == 5.78 and on["prefill_ms_per_token"] == pytest.approx(5.78 / 5) and on["decode_rows"] == 1
    off = timing_callout([step("prefill", 5.78, 5.65, 5)] + [step("decode", 3.0, 2.9, q) for q in (6, 7, 8)])
    assert off["decode_rows"] == 7 and off["tpot_ms"] == 3.0
    even = timing_callout([step("prefill", 5.78, 5.65, 5)] + [step("decode", 3.0, 2.9, q) for q in (6, 7, 8, 9)])
    assert even["decode_rows"] == 7.5  # the median of 6..9, not truncated to 7
    spread = timing_callout([step("prefill", 5.0, 4.9, 5)] + [step("decode", ms, ms, 1) for ms in (4.5, 13.4, 4.4)])
    assert spread["tpot_ms"] == 4.5 and spread["tpot_range_ms"] == (4.4, 13.4)  # the median, and the steps' spread


def test_a_difference_of_zero_is_said_to_be_identical_never_rounding():
    """bf16 runs gave "keys within **0** and values within **0** ... (float rounding)" and "Largest logit
    difference: 0 (floating-point rounding; the computation order differs)": no rounding made a zero."""
    from drawing.differences import cache_match_words, logit_gap_words

    assert "identical" in cache_match_words(0.0, 0.0) and "rounding" not in cache_match_words(0.0, 0.0)
    mixed = cache_match_words(0.0, 2e-7)
    assert "keys **identical**" in mixed and "values within **2e-07**" in mixed and "(float rounding)" in mixed
    assert cache_match_words(3e-7, 2e-7) == ("keys within **3e-07** and values within **2e-07** of what the cache "
                                             "holds (float rounding)")
    assert logit_gap_words(0.0) == "0: identical, bit for bit"
    assert "rounding" in logit_gap_words(1.5e-5) and "1.5e-05" in logit_gap_words(1.5e-5)
