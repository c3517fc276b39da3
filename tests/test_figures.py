"""Figure builders show what the traces say."""

from __future__ import annotations

import numpy as np

from drawing.attention import assembled_attention, attention_heatmap
from drawing.kv import kv_grid_figure
from drawing.latency import latency_figure, traces_frame
from drawing.matmuls import matmul_figure
from drawing.palette import CHOSEN
from drawing.tokens import next_token_figure, token_chips_html
from engine import Stepper

PROMPT = "Once upon a time there was a cat"


def test_assembled_attention_adds_one_row_per_decode_and_keeps_earlier_rows(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, max_new_tokens=10, stop_on_eos=False)
    s.prefill()
    before = assembled_attention(s.records, 1, 0)
    s.run(3)
    after = assembled_attention(s.records, 1, 0)
    n = s.prompt_len
    assert before.shape == (n, n)
    assert after.shape == (n + 3, n + 3)
    assert np.array_equal(after[:n, :n], before, equal_nan=True)
    assert np.isnan(after[n, n + 1:]).all() and not np.isnan(after[n + 2]).any()


def test_latency_figure_has_one_bar_per_step_and_estimate_is_labelled(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, use_cache=False, max_new_tokens=5, stop_on_eos=False)
    s.run()
    f = latency_figure(s.records)
    bars = [t for t in f.data if t.type == "bar"][0]
    assert len(bars.y) == 5
    assert any("estimate" in (t.name or "") for t in f.data)


def test_kv_grid_has_one_column_per_cached_position(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, max_new_tokens=4, stop_on_eos=False)
    s.run()
    z = np.asarray(kv_grid_figure(s.records, tiny_lm.spec.layers).data[0].customdata)
    assert z.shape == (tiny_lm.spec.layers, s.records[-1].kv_len)
    assert list(z[0, -3:]) == [1, 2, 3]  # each decode step wrote one column


def test_next_token_figure_highlights_the_chosen_token(tiny_lm):
    t = Stepper(tiny_lm, PROMPT).prefill()
    after = next_token_figure(t).data[1]
    chosen = [i for i, c in enumerate(t.top) if c.token_id == t.token_id]
    assert [after.marker.color[i] for i in chosen] == [CHOSEN]


def test_token_chips_escape_html_and_mark_fed_tokens():
    html = token_chips_html([(1, "<b>")], [(2, " x")], {1})
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert html.count("3px solid #111") == 1


def test_traces_frame_has_one_row_per_step(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, max_new_tokens=4, stop_on_eos=False)
    s.run()
    df = traces_frame(s.records)
    assert list(df["phase"]) == ["prefill", "decode", "decode", "decode"]
    assert list(df["kv_len"]) == [t.kv_len for t in s.records]


# ---------------------------------------------------------------- readable at 1280x720, honest under noise


def _busy(traces):
    """The walk-through's busy server: a decode step slower than the prefill, one repeat far off."""
    from dataclasses import replace

    from engine.forward.run import Timing

    out = [replace(t, timing=Timing((4.0, 4.1, 4.2), None, 0.0)) for t in traces]  # quiet, then three things go wrong
    out[0] = replace(out[0], timing=Timing((21.8, 21.0, 22.5), None, 0.0))
    out[3] = replace(out[3], timing=Timing((5.9, 6.1, 58.0), None, 0.0))
    out[-1] = replace(out[-1], timing=Timing((27.3, 26.9, 27.9), None, 0.0))
    return out


def test_every_latency_bar_fits_its_axis_and_a_busy_server_is_said_on_the_chart(tiny_lm):
    from drawing.caveats import latency_note

    s = Stepper(tiny_lm, PROMPT, max_new_tokens=8, stop_on_eos=False)
    s.run()
    traces = _busy(s.records)
    note = latency_note(traces)
    f = latency_figure(traces, note=note)
    top = f.layout.yaxis.range[1]
    assert top >= max(t.latency_ms for t in traces)  # the 27.3 ms bar is whole (it was cut at 25 ms)
    assert f.layout.xaxis.range[0] > -1  # the step axis starts at the prefill, not at -2
    texts = [a.text for a in f.layout.annotations]
    said = texts + [d.name for d in f.data if d.showlegend is not False and d.name]  # on the chart, and its legend
    assert sum(t.startswith("cut:") for t in said) == 1  # cut whiskers said once, in the legend: labels cannot collide
    box = next(t for t in texts if t.startswith("⚠ The server was busy"))
    assert "step 3's 3 timed runs ranged 5.9–58.0 ms" in box.replace("<br>", " ")
    # under the plot, in a margin of its own: it covers no bar, tick or legend (it sat on the bars at 390 px)
    note = next(a for a in f.layout.annotations if a.text.startswith("⚠"))
    assert (note.y, note.yanchor, note.yref) == (0.0, "top", "paper") and note.yshift < 0
    plain = latency_figure(traces)
    assert f.layout.height == plain.layout.height and f.layout.margin.b > plain.layout.margin.b  # fits as before
    assert any(t == "TTFT" for t in texts) and any(t == "TPOT" for t in texts)


def test_the_next_token_axis_ends_a_little_above_its_tallest_bar(tiny_lm):
    t = Stepper(tiny_lm, PROMPT).prefill()
    f = next_token_figure(t)
    tallest = max(max(c.p_before, c.p_after) for c in t.top)
    assert tallest <= f.layout.yaxis.range[1] <= min(1.0, max(tallest, 0.05)) * 1.2  # never a near-empty axis to 1
    assert f.layout.yaxis.title.text == "probability"


def test_the_matmul_table_numbers_the_five_and_fits_its_height(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, max_new_tokens=3, stop_on_eos=False)
    s.run()
    f = matmul_figure(s.records[-1], tiny_lm.spec, 0)
    names = list(f.data[0].cells.values[0])
    assert [n[0] for n in names[:5]] == ["①", "②", "③", "④", "⑤"] and len(names) == 7
    assert not any("<br>" in c for col in f.data[0].cells.values for c in col)  # one line a row: the height is exact
    assert f.layout.height >= (len(names) + 1) * f.data[0].cells.height  # every row fits: nothing scrolls inside


def test_the_heatmap_labels_every_key_up_to_15_then_evenly_spaced_ones_and_always_the_newest():
    """Up to 15 keys every one is named; past that, side by side they lay on each other on a projector, so keys
    spaced evenly (the labels chosen, not plotly's thinning) and the newest, which the query is."""
    z = np.full((2, 30), 0.5)
    labels = [f"{i} ·w" for i in range(30)]
    assert list(attention_heatmap(z[:, :15], ["head 0", "head 1"], labels[:15], "t").layout.xaxis.tickvals) == \
        labels[:15]
    shown = list(attention_heatmap(z, ["head 0", "head 1"], labels, "t").layout.xaxis.tickvals)
    assert shown[0] == labels[0] and shown[-1] == labels[-1] and 8 <= len(shown) <= 12
    gaps = {labels.index(b) - labels.index(a) for a, b in zip(shown, shown[1:-1])}
    assert gaps == {3}, gaps  # evenly spaced, up to the newest


def test_a_one_character_next_token_fills_its_chip_with_its_id(tiny_lm):
    """A stop string's "." left the stage's "next:" box nearly empty."""
    import re
    from dataclasses import replace

    from drawing.stage import CHOSEN_MIN_W, stage_svg

    s = Stepper(tiny_lm, PROMPT, max_new_tokens=2, stop_on_eos=False)
    s.run()
    t = replace(s.records[-1], token=".", token_id=14)
    chip = re.search(r'<g data-role="chosen-chip">(.*?)</g>', stage_svg(t, s.pieces(), s.prompt_len)).group(1)
    assert float(re.search(r'width="([\d.]+)"', chip).group(1)) >= CHOSEN_MIN_W
    assert ">.</text>" in chip and ">id 14</text>" in chip


def test_the_serving_memory_table_says_units_and_which_figure_is_averaged():
    from topics.serving.draw import memory_frame
    from topics.serving.record import Held, Memory, Sharing

    held = Held(peak_bytes=6291456, wasted=0.5, source="x")
    mem = Memory(position_bytes=4, max_length=16, sharing=Sharing(1, 1, 1, 1, 0, 1.0), paged=held,
                 reserve_max_length=held, static_padding=held)
    df = memory_frame(mem)
    assert list(df.columns) == ["allocator", "peak KV held", "wasted (held, no token), averaged", "source"]
    assert df["peak KV held"][0] == "6.0 MiB (6,291,456 B)"  # not a bare 6291456
