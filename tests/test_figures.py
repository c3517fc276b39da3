"""Figure builders show what the traces say."""

from __future__ import annotations

import numpy as np

from engine import Stepper
from engine.draw import figures as fig

PROMPT = "Once upon a time there was a cat"


def test_assembled_attention_adds_one_row_per_decode_and_keeps_earlier_rows(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, max_new_tokens=10, stop_on_eos=False)
    s.prefill()
    before = fig.assembled_attention(s.traces, 1, 0)
    s.run(3)
    after = fig.assembled_attention(s.traces, 1, 0)
    n = s.prompt_len
    assert before.shape == (n, n)
    assert after.shape == (n + 3, n + 3)
    assert np.array_equal(after[:n, :n], before, equal_nan=True)
    assert np.isnan(after[n, n + 1:]).all() and not np.isnan(after[n + 2]).any()


def test_latency_figure_has_one_bar_per_step_and_estimate_is_labelled(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, use_cache=False, max_new_tokens=5, stop_on_eos=False)
    s.run()
    f = fig.latency_figure(s.traces)
    bars = [t for t in f.data if t.type == "bar"][0]
    assert len(bars.y) == 5
    assert any("estimate" in (t.name or "") for t in f.data)


def test_kv_grid_has_one_column_per_cached_position(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, max_new_tokens=4, stop_on_eos=False)
    s.run()
    z = np.asarray(fig.kv_grid_figure(s.traces, tiny_lm.spec.layers).data[0].customdata)
    assert z.shape == (tiny_lm.spec.layers, s.traces[-1].kv_len)
    assert list(z[0, -3:]) == [1, 2, 3]  # each decode step wrote one column


def test_next_token_figure_highlights_the_chosen_token(tiny_lm):
    t = Stepper(tiny_lm, PROMPT).prefill()
    after = fig.next_token_figure(t).data[1]
    chosen = [i for i, c in enumerate(t.top) if c.token_id == t.token_id]
    assert [after.marker.color[i] for i in chosen] == [fig.CHOSEN]


def test_token_chips_escape_html_and_mark_fed_tokens():
    html = fig.token_chips_html([(1, "<b>")], [(2, " x")], {1})
    assert "&lt;b&gt;" in html and "<b>" not in html
    assert html.count("3px solid #111") == 1


def test_traces_frame_has_one_row_per_step(tiny_lm):
    s = Stepper(tiny_lm, PROMPT, max_new_tokens=4, stop_on_eos=False)
    s.run()
    df = fig.traces_frame(s.traces)
    assert list(df["phase"]) == ["prefill", "decode", "decode", "decode"]
    assert list(df["kv_len"]) == [t.kv_len for t in s.traces]
