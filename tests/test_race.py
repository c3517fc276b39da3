"""The race page and its pieces: both modes, same tokens, honest timing."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from engine.generate.compare import compare
from topics.race import draw as race_draw
from topics.race import measure as race
from ui.apptest import app_test, page


def test_growth_exponent_recovers_linear_and_quadratic():
    n = list(range(1, 60))
    assert abs(race.growth_exponent(n, [3 * x for x in n]) - 1) < 1e-6
    assert abs(race.growth_exponent(n, [0.5 * x * x for x in n]) - 2) < 1e-6
    assert race.growth_exponent([1, 2], [1, 4]) is None


def test_race_frame_has_one_row_per_step_per_mode(tiny_lm):
    rep = race.RaceReport.of(compare(tiny_lm, "Once upon a time", new_tokens=8, stop_on_eos=False))
    df = race.race_frame(rep)
    assert len(df) == 16 and set(df["mode"]) == {"cache", "nocache"}
    assert (df[df["phase"] == "prefill"]["latency_ms"] > 0).all()  # prefill is timed, not recorded as zero
    s = race.summary(rep, df)
    assert s.identical and s.nocache_flops_exponent > s.cache_flops_exponent
    for mode in ("cache", "nocache"):  # the totals said are the sums of the table's decode rows
        decode = df[(df["mode"] == mode) & (df["phase"] == "decode")]["latency_ms"].sum()
        assert getattr(s.speedup, f"{mode}_total_ms") == pytest.approx(decode, abs=1e-3)
    assert json.loads(json.dumps(s.to_dict()))["identical"] is True  # the JSON edge


def test_what_the_cache_saves_is_said_three_ways_from_the_race_itself(bundled_lm):
    """The FLOP ratio, the measured ratio and the roofline's rule max(1, n / R) (R the ridge in tokens), each read off
    the race's own frame: R here the device's one ridge (peak over DRAM's rate, fp32), R on an H100 in bf16 (~295 tokens, so at
    these lengths the rule predicts ×1: the cache saves little time there)."""
    import re

    from physics import roofline

    rep = race.RaceReport.of(compare(bundled_lm, "Once upon a time", new_tokens=24, stop_on_eos=False))
    df = race.race_frame(rep)
    here = roofline.DeviceRoof("cpu", 1.5e11, 2.5e10, True, ((16 * 2**20, 2.5e10), (1024 * 2**20, 1.2e10)))
    h100 = roofline.h100()
    rule = race.cache_rule(df, rep.speedup.total_ratio, here, h100)
    on = df[(df["mode"] == "cache") & (df["phase"] == "decode")]
    off = df[(df["mode"] == "nocache") & (df["phase"] == "decode")]
    ridge = 1.5e11 / 1.2e10 * 4 / 2  # the one ridge in rows: peak over DRAM's rate (the last probed), fp32
    assert rule.ridge_here == pytest.approx(ridge) and rule.ridge_gpu == pytest.approx(h100.ridge_tokens)
    assert rule.rule_here == pytest.approx(sum(max(1, n / ridge) for n in off["q_len"]) / len(off))
    assert rule.rule_gpu == 1.0  # every step here is far below an H100's ridge in tokens
    said = race.cache_rule_sentence(rule)
    m = re.search(r"over these (\d+)–(\d+)-position steps: ×(\d+) in arithmetic \(FLOP estimates\), ×([\d.]+) measured "
                  r"here\. .* max\(1, n / R\) .* Here R ≈ (\d+) tokens \(fp32\), so the rule gives ×([\d.]+), against "
                  r"×([\d.]+) measured \(×([\d.]+) the rule's\)\. The rule assumes a cached step held up by reading the "
                  r"weights; this model's is (.+?)(, so the rule does not reach a model this small [^.]+)?\. On an "
                  r"NVIDIA H100 SXM at batch 1, R ≈ (\d+) tokens \(bf16\) and it predicts ×([\d.]+): there the cache "
                  r"would save little time", said)
    assert m, said
    assert (int(m.group(1)), int(m.group(2))) == (off["q_len"].min(), off["q_len"].max())
    assert int(m.group(3)) == round(off["flops_estimate"].sum() / on["flops_estimate"].sum())
    assert float(m.group(4)) == round(rep.speedup.total_ratio, 1)
    assert int(m.group(5)) == round(ridge) and float(m.group(6)) == round(rule.rule_here, 1)
    assert float(m.group(7)) == round(rep.speedup.total_ratio, 1)  # the gap between them, said whatever its size
    assert float(m.group(8)) == round(rep.speedup.total_ratio / rule.rule_here, 1)
    assert int(m.group(11)) == round(h100.ridge_tokens) and float(m.group(12)) == 1.0
    # the rule's premise, checked against the cached step's own verdict: said, and where it fails, what follows
    assert m.group(9) == rule.cached_label
    assert (m.group(10) is not None) == (rule.cached_kind == "overhead-bound")


def test_sweep_reports_medians_for_both_modes(tiny_lm):
    df = race.sweep(tiny_lm, "Once upon a time", lengths=(4, 8), repeats=2)
    assert len(df) == 4 and set(df["tokens"]) == {4, 8}
    assert (df["total_ms"] > 0).all()
    assert ((df["low_total_ms"] <= df["total_ms"]) & (df["total_ms"] <= df["high_total_ms"])).all()


@pytest.mark.slow
def test_a_20_token_race_on_the_bundled_model():
    at = app_test(300).run()
    at.switch_page(page("race")).run()
    at.number_input(key="race_steps").set_value(20).run()
    at.button(key="race_start").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Identical tokens" in s.value and "same 20 tokens" in s.value for s in at.success)
    assert len(at.get("download_button")) == 1
    # the CSV offered for download: one row per forward pass per mode (prefill chose token 1, 19 decode steps)
    result = at.session_state["race_result"]
    df = pd.read_csv(io.StringIO(result.df.to_csv(index=False)))
    assert len(df) == 40
    assert len(df[df["phase"] == "prefill"]) == 2 and (df[df["phase"] == "prefill"]["latency_ms"] > 0).all()
    said = race.cache_rule_sentence(result.rule)  # the rule, beside the measured ratio
    assert any(m.value.replace("\\", "") == said for m in at.markdown)
    assert f"×{result.summary.speedup.total_ratio:.1f} measured here" in said


def measured(cache_ms: list[float], nocache_ms: list[float]) -> pd.DataFrame:
    """A race frame as race_frame makes it, with these per-step times (step 0 the prefill)."""
    rows = []
    for mode, times in (("cache", cache_ms), ("nocache", nocache_ms)):
        cumulative = 0.0
        for step, ms in enumerate(times):
            cumulative += ms
            rows.append({"mode": mode, "step": step, "phase": "prefill" if step == 0 else "decode",
                         "latency_ms": ms, "cumulative_ms": cumulative})
    return pd.DataFrame(rows)


def test_playback_finishes_the_cached_run_first_in_proportion_to_the_measured_totals():
    """The cached run measured 2 + 29 x 1 = 31 ms, the run without it 2 + 29 x 3 = 89 ms: when the cached one has
    finished, the other shows exactly the tokens it had made by then (10), and is not finished."""
    df = measured([2.0] + [1.0] * 29, [2.0] + [3.0] * 29)
    total = race.progress_at(df, float("inf"))
    assert (total.cache.total_ms, total.nocache.total_ms) == (31.0, 89.0)
    state = race.progress_at(df, 31.0)
    assert state.cache == race.Lane(tokens=30, total=30, finished=True, total_ms=31.0)
    assert state.nocache.tokens == 10 and not state.nocache.finished  # 2 + 3 x 9 = 29 <= 31 < 32
    assert race.progress_at(df, 1.9).cache.tokens == 0  # a token counts once the pass that chose it is done
    # the playback follows the measurement, not the lesson: a busy machine that slowed the cached run shows it last
    flipped = race.progress_at(measured([2.0] + [3.0] * 29, [2.0] + [1.0] * 29), 31.0)
    assert flipped.nocache.finished and flipped.cache.tokens == 10


def test_the_playback_of_a_real_race_ends_at_each_runs_own_measured_total(tiny_lm):
    rep = race.RaceReport.of(compare(tiny_lm, "Once upon a time", new_tokens=12, stop_on_eos=False))
    df = race.race_frame(rep)
    total = race.progress_at(df, float("inf"))
    for mode in race_draw.MODES:
        times = [t.latency_ms for t in rep.runs[mode].records]
        assert total.of(mode).total_ms == pytest.approx(sum(times), abs=1e-3) and total.of(mode).finished
        cumulative = list(df[df["mode"] == mode]["cumulative_ms"])  # rounded to 0.1 µs, as the CSV has it
        half = race.progress_at(df, cumulative[5]).of(mode)
        assert half.tokens == 6 and not half.finished


def test_the_headline_never_claims_more_than_the_fit():
    n = list(range(1, 80))
    linear, steeper = [5 * x for x in n], [5 * x + 0.01 * x * x for x in n]
    fit = race.growth_fit
    words = race.headline(race.Growth(fit(n, linear), fit(n, steeper)))
    assert "n to the power 1.00 with the cache" in words and "Without the cache it measurably grows faster." in words
    assert "cannot be told apart" not in words and "against the lesson" not in words
    flat = race.headline(race.Growth(fit(n, linear), fit(n, linear)))
    assert "cannot be told apart" in flat and "faster" not in flat
    # a busy server can make the cached run's time grow faster, with ranges that do not overlap: said as measured,
    # never "cannot be told apart" (they can) nor "without the cache it grows faster" (it did not)
    backwards = race.headline(race.Growth(fit(n, steeper), fit(n, linear)))
    assert "cached run's time grew measurably faster, against the lesson" in backwards
    assert "cannot be told apart" not in backwards and "Without the cache it measurably grows faster" not in backwards
    f = race.growth_fit(n, [x**1.5 for x in n])
    assert abs(f.k - 1.5) < 1e-9 and f.low <= f.k <= f.high
    assert race.headline(race.Growth(None, fit(n, linear))) == "Too few steps to fit a growth rate."
    # a tight fit's range in the digits that keep its ends apart: '(95% range 1.06–1.06)' said nothing
    tight = race.headline(race.Growth(race.GrowthFit(1.06, 1.058, 1.063), race.GrowthFit(1.3, 1.2, 1.4)))
    assert "(95% range 1.058–1.063)" in tight
    assert "bends these fits" not in words and "bends these fits" in race.headline(race.Growth(fit(n, linear),
                                                                                              fit(n, steeper)), busy=True)


@pytest.mark.slow
def test_the_race_says_when_a_busy_server_made_the_cache_off_run_look_faster(monkeypatch):
    """A comparison that flips against the lesson gets the noise rule's sentence on the chart and under it."""
    from drawing import caveats as noise

    monkeypatch.setattr(noise, "compare_note", lambda cache, nocache: noise.BUSY + ": cached decode steps ranged "
                        "4.0–30.0 ms around a median of 4.0 ms; in total the cache-off decode steps took 40 ms. The "
                        "times are as measured; the work (estimate) is what the cache saves.")
    at = app_test().run()
    at.switch_page(page("race")).run()
    at.number_input(key="race_steps").set_value(8).run()
    at.button(key="race_start").click().run()
    assert not at.exception
    assert any(noise.BUSY in w.value for w in at.warning)
    growth = next(m.value for m in at.markdown if "Total decode time grows like" in m.value)
    assert "bends these fits" in growth  # a fit over steps the note calls noisy is not read as the physics
    chart = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if "Per-step latency" in c.proto.spec)
    note = next(a for a in chart["layout"]["annotations"] if a["text"].startswith("⚠ The server was busy"))  # on it
    # whole on a 390-px phone, whose chart is ~358 px wide: each line, at ~0.6 em a character, starts at the plot's
    # left edge (its left margin in) and ends inside the chart (64 characters a line ran past it: "cached decode ste")
    widest = max(len(line) for line in note["text"].split("<br>")) * 0.6 * note["font"]["size"]
    assert chart["layout"]["margin"]["l"] + widest <= 358, (widest, note["text"])


def test_the_sweep_charts_label_only_the_lengths_and_1_2_5_steps():
    """No minor log-axis digits ("3 4 5 … 100 2") in the sweep charts."""
    from topics.race.draw import log_ticks, sweep_figure

    df = pd.DataFrame([{"tokens": n, "mode": m, "ms_per_token": v, "total_ms": v * n}
                       for n, v in ((32, 3.0), (64, 3.5), (128, 4.4)) for m in ("cache", "nocache")])
    f = sweep_figure(df, "ms_per_token", "Time per token")
    assert list(f.layout.xaxis.tickvals) == [32, 64, 128]
    assert list(f.layout.yaxis.tickvals) == log_ticks(3.0, 4.4) == [3.0, 4.4]  # too short for 1-2-5: its ends
    assert log_ticks(3, 100) == [5, 10, 20, 50, 100]


def test_the_sweeps_medians_are_drawn_with_their_repeats_spread_and_three_repeats_at_least():
    """"Each point is the median of repeated runs" held at repeats = 1 (the widget allowed it): one run, no spread.
    The widget starts at 3, and each point, time per token and total, carries a bar from its fastest repeat to its
    slowest."""
    from topics.race.draw import sweep_figure

    df = sweep_frame([(32, 3.9, 8.0), (256, 10.5, 60.0)], spread=1.2)
    f = sweep_figure(df, "ms_per_token", "Time per token")
    total = sweep_figure(df, "total_ms", "Total decode time")
    for fig, column in ((f, "ms_per_token"), (total, "total_ms")):  # the total too: it said "median" with no bar
        for t in fig.data:
            d = df[df["mode"] == ("cache" if "off" not in t.name.lower() else "nocache")]
            assert list(t.y + t.error_y.array) == pytest.approx(list(d[f"high_{column}"]))
            assert list(t.y - t.error_y.arrayminus) == pytest.approx(list(d[f"low_{column}"]))
        assert "bars min–max" in fig.layout.yaxis.title.text
    at = app_test().run()
    at.switch_page(page("race")).run()
    assert at.number_input(key="race_repeats").min == 3


def sweep_frame(points, spread: float = 1.1) -> pd.DataFrame:
    """A sweep as the page gets it: medians per (tokens, mode), and the repeats' min-max around them."""
    return pd.DataFrame([{"tokens": n, "mode": m, "ms_per_token": v, "total_ms": v * n, "low_ms_per_token": v / spread,
                          "high_ms_per_token": v, "low_total_ms": v * n / spread, "high_total_ms": v * n}
                         for n, c, off in points for m, v in (("cache", c), ("nocache", off))])


def test_the_sweep_caption_says_what_its_own_numbers_did():
    """The caption is read off the medians the chart draws: a cached time per token that rose 3.9 → 10.5 ms is said
    to have risen (not "about flat"), and one that rose 5% is said to have risen 5%: the factor, never a word a
    hidden threshold picks."""
    from topics.race.draw import sweep_caption

    rose = sweep_caption(sweep_frame([(32, 3.9, 8.0), (256, 10.5, 60.0)]))
    assert "flat" not in rose and "rose from 3.9 to 10.5 ms (×2.69)" in rose
    assert "without it, time per token rose from 8 to 60 ms (×7.50)" in rose and "busy" not in rose
    held = sweep_caption(sweep_frame([(32, 3.9, 8.0), (64, 4.0, 15.0), (256, 4.1, 60.0)]))
    assert "with the cache, time per token rose from 3.9 to 4.1 ms (×1.05)" in held and "flat" not in held
    shipped = sweep_caption(sweep_frame([(32, 3.14, 8.0), (256, 3.7, 60.0)]))  # the audit's 18%, once "about flat"
    assert "rose from 3.14 to 3.7 ms (×1.18)" in shipped and "flat" not in shipped


def test_a_sweep_on_a_busy_server_says_so_with_the_spread():
    from drawing.caveats import BUSY
    from topics.race.draw import sweep_caption

    wide = sweep_caption(sweep_frame([(32, 3.9, 8.0), (256, 4.0, 60.0)], spread=3.0))
    assert BUSY in wide and "(×3.0)" in wide
    flipped = sweep_caption(sweep_frame([(32, 3.0, 8.0), (256, 12.0, 16.0)]))  # the cached step grew faster
    assert BUSY in flipped and "grew as fast as the cache-off one" in flipped


def test_the_race_alternates_which_mode_steps_first_and_says_a_prefill_gap_is_one_timings_noise(bundled_lm):
    """The cache-on run always stepped first, so it paid every first pass over a new shape: its prefill, the same
    work as the cache-off one, was slower in 4 of 5 races (8.3 against 2.7 ms), beside "the same work". Which mode
    steps first now alternates, and two prefill times more than APART apart are said to be one timing's noise."""
    from topics.race.draw import APART, prefill_caption

    order = []
    compare(bundled_lm, "Once upon a time", new_tokens=4, on_step=lambda mode, trace: order.append(mode))
    pairs = [tuple(order[i:i + 2]) for i in range(0, len(order), 2)]
    assert pairs[0] == ("cache", "nocache") and pairs[1] == ("nocache", "cache") and pairs[2] == pairs[0]
    assert "noise" not in prefill_caption(5.0, 5.0 * APART * 0.99)
    said = prefill_caption(8.3, 2.7)
    assert "timed ×3.1 apart" in said and "the timing's, not the cache's" in said


def test_the_race_clock_and_the_decode_tiles_say_which_counts_the_prefill():
    """The lanes read "30 / 30 tokens · 0.26 s" and the tiles under them "decode 245 ms": the same run, one with its
    prefill and one without, neither saying so. The clock now says it counts the prefill; the tiles, decode steps."""
    from topics.race.draw import progress_html

    lane = progress_html("cache", 30, 30, 262.0, True)
    assert "30 / 30 tokens · 0.26 s with the prefill · finished" in lane
    at = app_test().run()
    at.switch_page(page("race")).run()
    at.number_input(key="race_steps").set_value(4).run()
    at.button(key="race_start").click().run()
    assert not at.exception, [e.value for e in at.exception]
    sp = at.session_state["race_result"].summary.speedup
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["cache on: decode steps"] == f"{sp.cache_total_ms:.0f} ms"
    assert "prefill" in next(m.help for m in at.metric if m.label == "cache on: decode steps")
