"""What a lecturer projects is true to its own numbers: its claims, checked on the engine and the pages.

The browser half (clipping, fonts, the first screen, the phone) is tests/test_browser_fidelity.py.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace

import numpy as np
import pytest

from drawing import gpt2
from drawing.caveats import BUSY
from drawing.latency import latency_ceiling, latency_figure
from drawing.palette import PREFILL, RECOMPUTED
from drawing.stage import stage_svg
from drawing.svg import MONO_EM, TEXT, W
from engine import Stepper
from engine.forward.run import Timing
from physics import roofline
from physics.roofline import DeviceRoof
from tests.test_app import click, fresh_app, open_view
from tests.test_lessons import lesson, text
from topics.speculative.lookahead import Lookahead, lookahead_svg
from topics.speculative.measure import rows_cost_sentence
from ui.apptest import page

ARTICLE = "A red jacket compliments any outfit."


def plotly_array(a) -> np.ndarray:
    """A plotly trace array, plain or in plotly's binary form."""
    if isinstance(a, dict) and "bdata" in a:
        shape = [int(n) for n in str(a.get("shape", "")).split(",") if n]
        out = np.frombuffer(base64.b64decode(a["bdata"]), dtype=a["dtype"])
        return out.reshape(shape) if shape else out
    return np.array(a, dtype=float)


def picture(at, testid: str) -> str:
    """The SVG of a picture the page shows as an <img> (st.html strips inline SVG)."""
    body = next(h.proto.body for h in at.get("html") if f'data-testid="{testid}"' in h.proto.body)
    return base64.b64decode(re.search(r"base64,([A-Za-z0-9+/=]+)", body).group(1)).decode()


# ---------------------------------------------------------------- 1. lesson 9's lookahead figure


@pytest.mark.slow
def test_lesson_9_shows_a_lookahead_figure_with_its_three_branches_labelled():
    at = lesson(9)
    svg = picture(at, "dl-lookahead")
    branches = re.findall(r'data-role="branch" data-branch="(\w+)"', svg)
    assert branches == ["input", "lookahead", "verification"]
    for label in ("1 · the input", "2 · lookahead branch", "3 · verification branch"):
        assert label in svg
    plan = Lookahead()
    rows = int(re.search(r'data-rows="(\d+)"', svg).group(1))
    assert rows == 1 + plan.window * (plan.ngram - 1) + plan.guesses * (plan.ngram - 1)
    assert f"One pass of {rows} rows" in text(at)  # the words and the picture say the same


def test_the_lookahead_figure_is_drawn_from_its_figures():
    svg = lookahead_svg(Lookahead(window=3, ngram=3, guesses=4))
    assert svg.count(">t+") == 3 * 2  # W positions × N-1 levels
    assert svg.count(">g") == 4 * 2  # G n-grams of N-1 tokens
    assert 'data-rows="15"' in svg


# ---------------------------------------------------------------- 2. GPT-2's own token count


def test_gpt2s_bundled_tokenizer_counts_the_worked_examples_prompt_as_7_tokens():
    assert gpt2.count(ARTICLE) == 7
    assert gpt2.pieces(ARTICLE) == ["A", " red", " jacket", " compliments", " any", " outfit", "."]
    assert gpt2.tokenizer().get_vocab_size() == 50257


@pytest.mark.slow
def test_the_gpt2_column_reads_gpt2s_shapes_for_its_worked_example():
    at = fresh_app()
    at.text_input(key="step_prompt").set_value(ARTICLE).run()
    click(at, "step_btn_prefill")
    click(at, "step_btn_next")
    open_view(at, "Shapes")
    table = next(t.value for t in at.table if "GPT-2 (124M)" in t.value.columns)["GPT-2 (124M)"]  # index: tensor
    assert table["q at prefill [batch, head, pos, head_dim]"] == "[1, 12, 7, 64]"
    assert table["q at a cached decode step"] == "[1, 12, 1, 64]"
    assert table["K cache after decode step 1"] == "[1, 12, 8, 64]"
    assert table["K cache after this step (step 1)"] == "[1, 12, 8, 64]"


@pytest.mark.slow
def test_the_shapes_view_with_the_cache_off_never_calls_a_cache_kept():
    """With the cache off the Shapes view listed "K cache after this step ... [1, 2, 11, 32]" and "so the cache is
    4× smaller" beside a status line reading "KV cache 0 bytes". The row and the note now say the cache is off;
    the click after, the cache on again, says it as kept."""
    at = fresh_app()
    at.toggle(key="bar_cache").set_value(False).run()
    click(at, "step_btn_prefill")
    click(at, "step_btn_next")
    open_view(at, "Shapes")
    rows = next(t.value for t in at.table if "GPT-2 (124M)" in t.value.columns).index
    assert "K cache after this step (step 1), were it kept: the cache is off" in rows
    note = next(n for n in notes(at) if "query heads share" in n)
    assert "(this run keeps none: the cache is off)" in note
    at.toggle(key="bar_cache").set_value(True).run()
    rows = next(t.value for t in at.table if "GPT-2 (124M)" in t.value.columns).index
    assert "K cache after this step (step 1)" in rows
    assert not any("the cache is off" in n for n in notes(at))


def notes(at) -> list[str]:
    """The view's notes as the page shows them (info, caption or markdown)."""
    return [e.value for e in (*at.info, *at.caption, *at.markdown)]


# ---------------------------------------------------------------- 3. compute-, memory- or overhead-bound, measured


ROOF = DeviceRoof("test", peak_flops=1e12, bandwidth=1e10, measured=True)  # ridge at 100 FLOP/byte


@pytest.mark.parametrize("ms, flops, moved, label", [
    (1.5, 1e6, 1e7, "memory-bound: 67% of the measured bandwidth (MBU)"),  # memory bound 1 ms, compute bound 0.001 ms
    (12.0, 1e6, 1e7, "overhead-bound: 8% of the measured bandwidth (MBU), <0.1% of the matmul peak"),
    (3.5, 1e6, 1e7, "overhead-bound: 29% of the measured bandwidth (MBU), <0.1% of the matmul peak"),
    (2.5, 2e9, 1e7, "compute-bound: 80% of the measured matmul peak (MFU)"),  # compute bound 2 ms, memory bound 1 ms
    (2.0, 1e6, 1e7, "memory-bound: 50% of the measured bandwidth (MBU)"),  # the bound is half the time: still most of it
    # the bound a third to a half of the time: the side of the ridge, and how near its roof it ran
    (2.5, 1e6, 1e7, "on the memory side, not memory-bound: 40% of the measured bandwidth (MBU)"),
    (5.5, 2e9, 1e7, "on the compute side, not compute-bound: 36% of the measured matmul peak (MFU)"),
])
def test_a_step_is_labelled_by_its_measured_time_against_both_bounds(ms, flops, moved, label):
    assert roofline.verdict(ms, flops, moved, ROOF).label == label


def test_which_side_of_the_ridge_is_a_prediction_that_no_measured_time_moves():
    """The side comes from the intensity against the ridge alone: the same pass timed fast or slow (a busy minute)
    keeps its side; only how near its roof it ran moves."""
    low, high = 0.5 * ROOF.ridge, 2 * ROOF.ridge
    for intensity in (low, high):
        sides = {roofline.verdict(ms, intensity * 1e7, 1e7, ROOF).side for ms in (0.01, 1.0, 100.0)}
        assert sides == {"memory" if intensity < ROOF.ridge else "compute"}
    fast, slow = (roofline.verdict(ms, 1e6, 1e7, ROOF) for ms in (1.0, 10.0))
    assert slow.share == pytest.approx(fast.share / 10)


def label_from(row_ms: float, memory_ms: float, compute_ms: float) -> str:
    """The rule, written again: bound by the larger bound within ×2 of it, on its side from ×2 to ×3, else
    overhead-bound."""
    larger = max(memory_ms, compute_ms)
    side = "memory" if memory_ms >= compute_ms else "compute"
    if row_ms > 3 * larger:
        return "overhead-bound"
    return f"{side} side" if row_ms > 2 * larger else f"{side}-bound"


def test_no_step_is_labelled_memory_bound_when_its_time_is_more_than_3x_its_memory_bound(bundled_lm):
    """Each real step against roofs built for it: one whose memory bound is most of the step's time (within ×2:
    memory-bound, it must say), one at ×2.9 (on the memory side, not bound by it), one at ×4 (overhead-bound), and
    one where the arithmetic bound is the larger (compute-bound)."""
    run = Stepper(bundled_lm, "Once upon a time", max_new_tokens=6)
    run.run()
    for t in run.records:
        seconds = t.forward_ms / 1e3
        tiny_flops = t.flops_estimate / (seconds * 1e-3)  # a peak that makes the compute bound 1000x below the time
        for over, expected in ((1.9, "memory-bound"), (2.9, "memory side"), (4.0, "overhead-bound")):
            roof = DeviceRoof("test", peak_flops=tiny_flops, bandwidth=t.bytes_estimate / (seconds / over), measured=True)
            v = roofline.step_verdict(t, roof)
            assert v.kind == expected, (t.step, over, v)
            assert v.memory_ms == pytest.approx(t.forward_ms / over)
        roof = DeviceRoof("test", peak_flops=t.flops_estimate / (seconds / 1.5), bandwidth=t.bytes_estimate / (seconds / 2),
                          measured=True)  # the arithmetic bound (2/3 of the time) above the memory bound (1/2)
        assert roofline.step_verdict(t, roof).kind == "compute-bound"


@pytest.mark.slow
def test_the_scale_page_shows_where_the_time_goes_before_any_run_and_labels_by_measurement():
    at = fresh_app()
    at.switch_page(page("scale")).run()
    assert not at.exception, [e.value for e in at.exception]
    bounds = next(d.value for d in at.dataframe if "what the measurement shows" in d.value.columns)
    assert {"prefill", "decode"} <= set(bounds["phase"])
    for _, row in bounds.iterrows():  # every verdict is the rule applied to the numbers beside it
        over = row["measured ms (median)"] / max(row["memory bound ms (bytes / bandwidth)"],
                                                 row["compute bound ms (FLOPs / peak)"])
        if min(abs(over - 2), abs(over - 3)) < 0.02:
            continue  # on the ×2 or ×3 line itself the table's rounding can tip it either way
        expected = label_from(row["measured ms (median)"], row["memory bound ms (bytes / bandwidth)"],
                              row["compute bound ms (FLOPs / peak)"])
        assert row["what the measurement shows"] == expected, row.to_dict()
        share = re.match(r"(<?[\d.]+)% of (bandwidth \(MBU\)|cache bandwidth|matmul peak \(MFU\))$",
                         row["share of its roof (measured)"])
        assert share, row.to_dict()  # the share of the larger bound's roof: 1 / the ratio beside it
        assert ("matmul" in share.group(2)) == (row["compute bound ms (FLOPs / peak)"]
                                                > row["memory bound ms (bytes / bandwidth)"]), row.to_dict()
        ratio = row["measured / larger bound"]
        if share.group(1).startswith("<"):
            assert ratio > 1000 * 0.9, row.to_dict()
        else:
            rounding = 0.51 if float(share.group(1)) >= 1 else 0.051  # whole percents from 1%, tenths below
            assert float(share.group(1)) == pytest.approx(100 / ratio, rel=0.01, abs=rounding), row.to_dict()
    parts = next(d.value for d in at.dataframe if "part" in d.value.columns)  # no step-through run needed
    assert len(parts) == 4 and parts["ms"].iloc[-1] > 0


def product(rows: int) -> str:
    """One row through each weight matrix is a matrix-vector product; several rows, a matrix-matrix product."""
    return "matrix-vector" if rows == 1 else "matrix-matrix"


@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
def test_the_stage_names_the_product_that_its_query_rows_make(tiny_lm, use_cache):
    """Prefill feeds the prompt's rows, a cached decode step one, a decode step without the cache every position
    again (matrix-matrix, though it makes one token): the caption follows the rows the stage draws."""
    run = Stepper(tiny_lm, "Once upon a time there was", max_new_tokens=3, stop_on_eos=False, use_cache=use_cache)
    run.run()
    for t in run.records:
        svg = stage_svg(t, run.pieces(), run.prompt_len)
        rows = svg.count('data-role="query-row"')
        assert rows == t.q_len == (1 if use_cache and t.phase == "decode" else t.kv_len)
        assert f"({product(rows)})" in svg and f"({product(2 if rows == 1 else 1)})" not in svg


@pytest.mark.parametrize("number", [2, 3])
@pytest.mark.slow
def test_lessons_2_and_3_name_the_product_from_the_rows_their_pass_feeds(number):
    """The rows a lesson says enter each block are the rows its stage draws, and the product it names follows."""
    at = lesson(number)
    t = text(at)
    rows = int(re.search(r"`\[1, (\d+), \d+\]`", t).group(1))  # the first [batch, pos, d_model] it prints
    assert rows == picture(at, "dl-stage").count('data-role="query-row"')
    assert (rows > 1) == (number == 2)  # lesson 2 shows prefill (the whole prompt), lesson 3 a cached decode step
    assert set(re.findall(r"\*\*(matrix-\w+)\*\*", t)) == {product(rows)}


# ---------------------------------------------------------------- 4. lesson 9's claim about extra rows


def test_the_extra_rows_sentence_says_the_ratio_and_its_implication_in_the_same_words_whatever_the_ratio():
    """Lesson 9's reading of its two timed passes: the ratio of the medians, its range across the timed runs, and the
    tokens a verify pass must yield to pay (the ratio itself). Only the numbers change with the ratio: no wording
    that flips when noise moves it across a cut-off."""
    one = Timing(samples_ms=(3.9, 4.0, 4.4), warmup_ms=9.0)
    said = {}
    for factor in (0.98, 1.10, 1.14, 1.16, 1.21, 4.0):
        verify = Timing(samples_ms=tuple(x * factor for x in (3.8, 4.0, 4.1)), warmup_ms=9.0)
        said[factor] = rows_cost_sentence(5, verify, one, 2.4)
        text = said[factor]
        ratio = f"{verify.forward_ms / one.forward_ms:.2f}"
        assert f"(×{ratio};" in text and f"yields more than {ratio} tokens" in text
        assert (f"between ×{verify.low_ms / one.high_ms:.2f} and ×{verify.high_ms / one.low_ms:.2f}") in text
        assert "yielded 2.40 tokens each" in text
        assert "so the bet's ratio is at least ×1: one measured under it is the two timings' noise" in text
    assert len({re.sub(r"[\d.]+", "#", text) for text in said.values()}) == 1, said  # the same words every time
    assert BUSY not in said[1.21]  # every pass's timed runs within x2 of each other
    busy = rows_cost_sentence(5, Timing(samples_ms=(4.7, 5.0, 9.9), warmup_ms=9.0), one, 2.4)
    assert f"{BUSY}: the verify pass's 3 timed runs ranged 4.7–9.9 ms (×2.1)" in busy  # the spread that says so


# ---------------------------------------------------------------- 5. the batch heatmap: masked, not zero


@pytest.mark.slow
def test_the_batch_heatmap_draws_padding_and_the_future_as_masked_not_as_zero():
    at = lesson(7)
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    masked, weights = plotly_array(chart["data"][0]["z"]), plotly_array(chart["data"][1]["z"])
    pads = int(re.search(r"got \*\*(\d+) padding positions", text(at)).group(1))
    assert pads > 0
    real = slice(pads, weights.shape[0])
    assert np.isnan(weights[real, :pads]).all()  # a real query's padded keys: no weight drawn...
    assert (masked[real, :pads] == 1).all()  # ...but the grey of the mask
    assert np.isnan(weights[:pads]).all()  # a padding query: every key masked
    for q in range(pads, weights.shape[0]):
        assert np.nansum(weights[q]) == pytest.approx(1.0, abs=1e-2)  # the real keys still sum to 1
        assert np.isnan(weights[q, q + 1:]).all()  # and the future is masked too


# ---------------------------------------------------------------- 9. one outlier does not set the axis


def test_one_slow_repeat_does_not_set_the_latency_axis_and_is_marked(tiny_lm):
    run = Stepper(tiny_lm, "Once upon a time", max_new_tokens=8, stop_on_eos=False)
    run.run()
    traces = list(run.records)
    slow = traces[4]
    traces[4] = replace(slow, timing=Timing((slow.forward_ms, slow.forward_ms * 1.1, 240.0), None, slow.sample_ms))
    f = latency_figure(traces)
    top = f.layout.yaxis.range[1]
    assert top < 240 and top >= max(t.latency_ms for t in traces if t is not traces[4])
    # named at its whisker's top: the 240 ms pass plus the step's time outside its pass (choosing the token),
    # which a loaded machine makes a millisecond or more
    said = [a.text or "" for a in f.layout.annotations] + [d.name or "" for d in f.data]  # on the chart, its legend
    named = [float(m) for text in said for m in re.findall(rf"step {slow.step}: (\d+) ms", text)]
    assert named and named[0] == pytest.approx(240 + traces[4].latency_ms - traces[4].forward_ms, abs=0.51)


def test_every_whisker_is_drawn_or_named_and_the_prefill_always_fits(tiny_lm):
    run = Stepper(tiny_lm, "Once upon a time", max_new_tokens=8, stop_on_eos=False)
    run.run()
    ceiling, outliers = latency_ceiling(run.records)
    tops = [t.latency_ms + t.timing.high_ms - t.forward_ms for t in run.records]
    marked = {step for step, _ in outliers}
    assert all(top <= ceiling or t.step in marked for t, top in zip(run.records, tops))  # drawn, or named
    assert ceiling >= max(t.latency_ms for t in run.records if t.phase == "prefill")


# ---------------------------------------------------------------- 10. the end-of-text chip fits its box


def _texts(svg: str, role: str) -> list[tuple[float, float, str]]:
    """(x, font size, text) of the <text> elements inside every <g data-role=role>."""
    out = []
    for group in re.findall(rf'<g data-role="{role}"[^>]*>(.*?)</g>', svg):
        for x, size, body in re.findall(r'<text x="([\d.]+)" y="[\d.]+" font-size="([\d.]+)"[^>]*>([^<]*)</text>', group):
            out.append((float(x), float(size), body))
    return out


def test_an_end_of_text_token_fits_its_chip_and_the_picture(bundled_lm):
    run = Stepper(bundled_lm, "Once upon a time", max_new_tokens=3)
    run.run()
    t = replace(run.records[-1], token="<|endoftext|>")
    svg = stage_svg(t, run.pieces(), run.prompt_len)
    rect_w = float(re.search(r'<g data-role="chosen-chip"><rect x="[\d.]+" y="[\d.]+" width="([\d.]+)"', svg).group(1))
    (x, size, body), = _texts(svg, "chosen-chip")
    assert body == "&lt;|endoftext|&gt;"  # whole, never "<|end"
    assert len("<|endoftext|>") * MONO_EM * size <= rect_w  # the text is no wider than its box
    (x, size, body), = _texts(svg, "chosen")  # the token the LM head chose
    assert x + len("<|endoftext|>") * MONO_EM * size <= W  # inside the picture
    assert size >= 10 * TEXT


# ---------------------------------------------------------------- 12. smaller things


@pytest.mark.slow
def test_the_race_bars_keep_their_modes_colours():
    at = fresh_app()
    at.switch_page(page("race")).run()
    at.number_input(key="race_steps").set_value(8).run()
    at.button(key="race_start").click().run(timeout=300)
    assert not at.exception, [e.value for e in at.exception]
    bars = " ".join(m.value for m in at.markdown if "race-bar-" in m.value)
    assert f'data-testid="race-bar-cache" style="height:100%;width:100.0%;border-radius:0.3rem;background:{PREFILL}' in bars
    assert f'data-testid="race-bar-nocache" style="height:100%;width:100.0%;border-radius:0.3rem;background:{RECOMPUTED}' \
        in bars
    assert not at.get("progress")  # streamlit's own bar takes the theme's red for both


@pytest.mark.slow
def test_the_scale_page_says_when_a_context_is_beyond_the_models_maximum():
    at = fresh_app()
    at.switch_page(page("scale")).run()
    at.selectbox(key="scale_model").set_value("Llama-3-8B").run()
    assert not any("reads at most" in w.value for w in at.warning)
    at.number_input(key="scale_tokens").set_value(488_000).run()
    assert any("Llama-3-8B reads at most 8,192 positions" in w.value.replace("\\", "") for w in at.warning)
    assert any("reads at most **8,192**" in m.value for m in at.markdown)


# ---------------------------------------------------------------- 13. lesson 6 is made once, and ends at end-of-text


@pytest.mark.slow
def test_lesson_6_includes_a_run_that_stops_at_end_of_text_and_reruns_without_generating_again(monkeypatch):
    at = lesson(6)
    assert re.search(r"stopped after \*\*\d+ tokens\*\*, reason: \*\*eos\*\*", text(at))
    import engine.generate.stepper as stepper

    made = []
    monkeypatch.setattr(stepper.Stepper, "decode", lambda self: made.append(1) or pytest.fail("generated again"))
    at.number_input(key="lesson6_seed").set_value(1).run()  # a new seed: one new prefill, no new story
    assert not at.exception, [e.value for e in at.exception]
    assert made == []


# ---------------------------------------------------------------- concepts: a request's steps, a web-text example


@pytest.mark.slow
def test_lesson_1_draws_one_request_with_every_step_measured():
    at = lesson(1)
    svg = picture(at, "dl-request")
    steps = re.findall(r'data-role="request-step" data-step="([^"]+)" data-ms="([\d.]+)"', svg)
    assert [name for name, _ in steps] == ["load the weights", "tokenize", "copy to the device", "prefill",
                                           "decode loop", "copy back", "detokenize"]
    ms = dict((name, float(v)) for name, v in steps)
    assert ms["load the weights"] > 0 and ms["prefill"] > 0 and ms["decode loop"] > 0
    assert all(v >= 0 for v in ms.values())


@pytest.mark.slow
def test_lesson_1_says_what_this_model_predicts_instead_of_nice_or_warm():
    at = lesson(1)
    said = next(m.value for m in at.markdown if "weather is so" in m.value)
    assert "nice" in said and "warm" in said and "TinyStories" in said
    assert re.search(r"nice' [\d.]+% \(rank [\d,]+\)", said.replace("\\", ""))


# ---------------------------------------------------------------- 12. the first Prefill of a session is not the slow one


WARM_PROBE = """
import json, sys
sys.path.insert(0, {root!r})
from engine import Stepper, load_model
from drawing.stage import stage_svg
from drawing.attention import heads_figure
from drawing.first_draw import warm_pictures
from drawing.palette import axis_labels
from drawing.tokens import next_token_figure
from engine.timing import now

lm = load_model("default", device="cpu")
if {warm}:
    warm_pictures(lm)
took = []
for prompt in ("Tom had a red ball.", "Lily went to the park.", "The cat sat down.", "Ben saw a big dog."):
    run = Stepper(lm, prompt, max_new_tokens=2, repeats=1)
    run.prefill()
    t0 = now()
    stage_svg(run.records[0], run.pieces(), run.prompt_len)
    heads_figure(run.records[0], 0, axis_labels(run.pieces()), cols=2, newest_only=True).to_json()
    next_token_figure(run.records[0]).to_json()
    took.append(now() - t0)
print(json.dumps(took))
"""


def _first_and_later(warm: bool) -> tuple[float, list[float]]:
    import subprocess
    import sys

    from ui.apptest import ROOT

    out = subprocess.run([sys.executable, "-c", WARM_PROBE.format(root=str(ROOT), warm=warm)], capture_output=True,
                         text=True, timeout=300, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    first, *later = json.loads(out.stdout.strip().splitlines()[-1])
    return first, later


@pytest.mark.perf
def test_after_the_load_warm_up_a_first_step_draws_as_fast_as_a_later_one():
    """ui/model.py warms every picture when it loads the model (drawing.first_draw): without it, the first step's
    figures of a process take ~40 ms more than the next step's (76 against 34 ms on the EPYC VM, quiet)."""
    # the extra a first draw costs over the fastest of three later ones, in seconds: a busy neighbour (the suite runs
    # on two workers) stretches every draw of a process alike, so the extra, not the ratio, is what the warm-up removes.
    # Each kind of process twice, alternated, the smaller extra of the two kept: a neighbour's burst during one
    # process's draws (CI, 2026-11-30: its later draws 77, 63, 50 ms) is not the first draw's cost, and a cost that
    # is real is in both.
    runs = {False: [], True: []}
    for warm in (False, True, False, True):
        first, later = _first_and_later(warm)
        runs[warm].append((first - min(later), first, later))
    cold_extra, warm_extra = min(runs[False])[0], min(runs[True])[0]
    assert cold_extra > 0.015, runs[False]  # the cost the warm-up removes is real
    assert warm_extra < 0.5 * cold_extra, runs  # and it removes most


def test_a_sliding_window_models_decode_step_is_taken_apart_without_changing_its_run(family_dirs):
    """The Scale page takes a step apart by default now: a sliding-window layer must come back exactly."""
    import torch

    from engine import load_model
    from topics.ladder.profile import decode_breakdown

    lm = load_model(family_dirs["gemma2"], device="cpu")  # window 4: the run below slides it
    taken, alone = (Stepper(lm, "Once upon a time there was", max_new_tokens=12, stop_on_eos=False) for _ in range(2))
    taken.run(7)
    alone.run(7)
    breakdown = decode_breakdown(taken, bandwidth=1e10, repeats=2)
    assert breakdown.wall_ms > 0
    a, b = taken.decode(), alone.decode()
    assert a.token_id == b.token_id and torch.allclose(taken.last_logits, alone.last_logits, atol=1e-5)
