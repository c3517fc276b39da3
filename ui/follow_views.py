"""A follower's views of the lecturer's step: the step page's views, drawn from the shared record.

Each is built by the same engine.draw.figures function the lecturer's page uses, from the same
(decoded) StepTrace, so a student sees the lecturer's numbers. Nothing here runs the model: the
Matmuls view's check that cached K/V equal a recomputation needs a forward pass, so it is left to
the lecturer's screen and to a fork.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from html import escape as plain_html

import streamlit as st

from engine.draw import figures as fig
from engine.draw.heads import heads_svg
from engine.draw.svg import picture_html
from ui.style import scale
from ui.text import plain

VIEWS = ["Attention", "Next token", "Matmuls", "Shapes", "KV cache", "Latency", "Tokens"]
_BUILT: OrderedDict = OrderedDict()
_BUILT_LOCK = threading.Lock()


def once(key: tuple, build):
    """A figure, table or picture of a shared step, built once per server for all its followers (read-only).

    Thirty followers of one class ask for the same step's pictures within a second of each other: the
    first builds them, the others reuse them (placing a built figure costs ~3 ms, building it ~30).
    """
    with _BUILT_LOCK:
        if key in _BUILT:
            _BUILT.move_to_end(key)
            return _BUILT[key]
    value = build()
    with _BUILT_LOCK:
        _BUILT[key] = value
        while len(_BUILT) > 256:
            _BUILT.popitem(last=False)
    return value


def show_view(view: str, shared, at: int, layer: int, head: int, where: tuple) -> None:
    """`where`: (class code, run) — with the step, what names a picture for every follower of the class."""
    t = shared.traces[at]
    traces = shared.traces[: at + 1]
    k = (*where, at, scale())
    if view == "Attention":
        attention(shared, t, traces, layer, head, k)
    elif view == "Next token":
        st.plotly_chart(once((*k, "next"), lambda: fig.next_token_figure(t, scale=scale())), key="follow_next")
        st.markdown(plain(f"Chosen: {fig.show_piece(t.token)} (id {t.token_id}) by {t.rule}."))
    elif view == "Matmuls":
        st.caption(f"Layer {layer}'s matmuls at this step, with the cache and without (FLOPs are estimates).")
        if shared.spec is not None:
            st.dataframe(fig.matmul_frame(t, shared.spec, layer), hide_index=True, width="stretch")
        st.caption("The check that cached K and V equal a full recomputation runs a forward pass: see it on the "
                   "lecturer's screen, or Fork and open Matmuls.")
    elif view == "Shapes":
        st.caption("The tensors of this pass, named by where they live; 'measured' shapes were read off the real "
                   "tensors.")
        st.dataframe(fig.shapes_frame(t), hide_index=True, width="stretch")
    elif view == "KV cache":
        if not t.use_cache:
            st.warning("The KV cache is off: nothing is stored between steps (0 bytes).")
            return
        st.dataframe(fig.kv_frame(t), hide_index=True, width="stretch")
        layers = shared.spec.layers if shared.spec is not None else len(t.layers)
        st.plotly_chart(once((*k, "kv_grid"), lambda: fig.kv_grid_figure(traces, layers, scale=scale())),
                        key="follow_kv_grid")
        st.plotly_chart(once((*k, "kv_growth"), lambda: fig.kv_growth_figure(traces, scale=scale())),
                        key="follow_kv_growth")
    elif view == "Latency":
        call = fig.timing_callout(traces)
        c = st.columns(2)
        c[0].metric("time to first token", f"{call['ttft_ms']:.1f} ms")
        c[1].metric("time per output token", f"{call['tpot_ms']:.1f} ms" if call["tpot_ms"] else "—")
        st.caption("Measured on the lecturer's server: each bar the median of the timed runs of that pass. The "
                   "dashed line is a FLOPs estimate, not a measurement.")
        st.plotly_chart(once((*k, "latency"), lambda: fig.latency_figure(traces, scale=scale())),
                        key="follow_latency")
    else:
        tokens(shared, t)


def attention(shared, t, traces, layer: int, head: int, k: tuple) -> None:
    """Every head of the layer for the newest query, as a picture (the same numbers as the step page's heatmap, a
    few milliseconds for the tab to draw); the two switches open the step page's interactive charts."""
    every = st.toggle("every query row (one panel per head)", key="follow_att_every",
                      disabled=t.pattern_rows <= 1 or t.layers[layer].pattern is None)
    if t.layers[layer].pattern is None:
        st.html(f'<div data-testid="dl-follow-heads">{plain_html(t.attention_note)}</div>')
    elif every and t.pattern_rows > 1:
        labels = fig.axis_labels(shared.pieces())
        st.plotly_chart(once((*k, "heads", layer, True),
                             lambda: fig.heads_figure(t, layer, labels, scale=scale(), cols=2, newest_only=False)),
                        key="follow_att_heads")
    else:
        st.html(once((*k, "heads_svg", layer), lambda: picture_html(
            heads_svg(t, layer, shared.pieces()), f"layer {layer}: every head's attention for the newest query",
            "dl-follow-heads")))
    st.caption("Each row is a query, each column a key it may look at; a row sums to 1. Hatched or grey: masked, "
               "not zero.")
    if st.toggle("one head, every step so far", key="follow_att_assembled"):
        labels = fig.axis_labels(shared.pieces())
        z = fig.assembled_attention(traces, layer, head)
        st.plotly_chart(fig.attention_heatmap(z, labels[: z.shape[0]], labels[: z.shape[1]],
                                              f"layer {layer}, head {head}", scale=scale()), key="follow_att_all")


def tokens(shared, t) -> None:
    ids, pieces = shared.ids, shared.pieces()
    known = list(zip(ids, pieces))[: t.kv_len + 1]
    st.caption("Text in, tokens out: prompt tokens blue, generated orange; the ones fed to this step's pass are "
               "outlined.")
    st.html(fig.token_chips_html(known[: shared.prompt_len], known[shared.prompt_len:],
                                 set(range(t.past, t.kv_len))))
