"""Draw every picture of a step once when the model loads, so no student's first Prefill pays for it.

The first plotly figure of a process builds plotly's validators (a third of a second and more), the first
stage builds its SVG helpers; a class's first click should cost what every later click costs. The run is
tiny (a 4-token prompt, two decode steps, timed once) and is thrown away.
"""

from __future__ import annotations

from drawing.attention import assembled_attention, attention_heatmap, heads_figure
from drawing.kv import kv_grid_figure, kv_growth_figure
from drawing.latency import latency_figure
from drawing.matmuls import matmul_frame
from drawing.palette import axis_labels
from drawing.stage import caption, stage_html, stage_svg
from drawing.tokens import next_token_figure
from engine.errors import DecodeLabError
from engine.timing import now


def warm_pictures(lm) -> float:
    """Build the stage and each view's figure for a tiny run; returns the ms it took (reported apart)."""
    from engine.generate.stepper import Stepper

    t0 = now()
    try:
        run = Stepper(lm, "Once upon a time", max_new_tokens=3, stop_on_eos=False, repeats=1)
        run.run()
    except DecodeLabError:  # a model this prompt does not suit: its first click simply pays the cost
        return 0.0
    pieces, labels = run.pieces(), axis_labels(run.pieces())
    for t in run.records:
        stage_html(stage_svg(t, pieces, run.prompt_len), caption(t))
    t = run.records[-1]
    figures = [next_token_figure(t), latency_figure(run.records), kv_growth_figure(run.records),
               kv_grid_figure(run.records, lm.spec.layers)]
    if t.layers and t.layers[0].pattern is not None:
        figures.append(heads_figure(t, 0, labels, cols=2, newest_only=True))
        z = assembled_attention(run.records, 0, 0)
        figures.append(attention_heatmap(z, labels[: z.shape[0]], labels[: z.shape[1]], "warm-up"))
    for f in figures:
        f.to_json()  # what a page does with it: serialising builds plotly's validators once per process
    matmul_frame(t, lm.spec).to_json()
    run.free()
    return (now() - t0) * 1e3


def blank_figure():
    """An empty, tiny plotly figure: placed out of sight before the first Prefill, it makes the browser load and
    start its chart library while the lecturer is still typing, instead of after the click."""
    import plotly.graph_objects as go

    return go.Figure().update_layout(height=10, margin=dict(l=0, r=0, t=0, b=0), xaxis_visible=False,
                                     yaxis_visible=False)
