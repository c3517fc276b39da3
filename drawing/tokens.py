"""Tokens and the next token: chips of the sequence, the next-token bars, a padded batch.

Pure builders: records in, plotly Figures / pandas DataFrames / HTML out; pages place them.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from drawing.palette import DECODE, GREY, MASKED, NEW, PREFILL, layout, legend_under_title, show_piece
from engine.forward.trace import StepTrace


def token_chips_html(prompt: list[tuple[int, str]], generated: list[tuple[int, str]],
                     fed_positions: set[int]) -> str:
    """Prompt tokens and generated tokens as coloured chips; the ones fed this step outlined."""
    chips = []
    for pos, (tid, piece) in enumerate(prompt + generated):
        colour = PREFILL if pos < len(prompt) else DECODE
        border = "3px solid #111" if pos in fed_positions else "3px solid transparent"
        chips.append(
            f'<span title="position {pos}, id {tid}" style="display:inline-block;margin:2px;padding:2px 6px;'
            f'border-radius:6px;background:{colour}22;border:{border};font-family:monospace;font-size:1.05rem">'
            f'{html.escape(show_piece(piece))}<sub style="color:{colour};font-size:0.7rem"> {tid}</sub></span>'
        )
    return "<div style='line-height:2.2'>" + "".join(chips) + "</div>"


def next_token_figure(t: StepTrace, scale: float = 1.0, height: int = 250) -> go.Figure:
    """The most likely tokens: probability before and after the warpers; each bar says its raw logit.

    The axis ends a little above the tallest bar (a run that is sure of its token fills the chart, an unsure one
    is not squeezed into the bottom half of an axis to 1.0), so the chart stays short enough for the first screen."""
    labels = [show_piece(c.token) for c in t.top]
    colours = [NEW if c.token_id == t.token_id else GREY for c in t.top]
    fig = go.Figure([
        go.Bar(x=labels, y=[c.p_before for c in t.top], name="before warpers · text: logit",
               marker_color="#c6dbef", text=[f"{c.logit:.1f}" for c in t.top], textposition="outside",
               cliponaxis=False, textfont=dict(size=11 * scale),
               hovertemplate="%{x}: p %{y:.3f}, logit %{text}<extra></extra>"),
        go.Bar(x=labels, y=[c.p_after for c in t.top], marker_color=colours,
               name=("after warpers: green taken (the largest)" if t.rule.startswith("greedy") else
                     "after warpers, drawn from: green drawn") + ", grey not"),  # both colours said: the
        # swatch takes the first bar's colour, green or grey
    ])
    fig.update_layout(uniformtext=dict(minsize=10 * scale, mode="show"))  # a logit over a thin bar stays legible
    top = max([c.p_before for c in t.top] + [c.p_after for c in t.top] + [0.05])
    fig.update_layout(barmode="group")
    fig.update_yaxes(title="probability", range=[0, min(1.0, top) * 1.18], tickformat=".0%")
    fig.update_xaxes(tickangle=None,  # plotly's own: level where they fit, turned as far as a phone needs
                     range=[-0.8, len(labels) - 0.5])  # room at the left: the first bar's logit clear of the ticks
    fig = layout(fig, f"Next token: {show_piece(t.token)} (green)", height=height, scale=scale)
    fig.update_layout(margin=dict(t=int(62 * scale)))
    return legend_under_title(fig, scale)  # a phone wraps its two names into two rows, under the title, not on it


PHONE_COLUMN_PX = 370  # the page's column on a 390 px phone
# wider than that, the grid scrolls sideways, and says so over its first columns (row 0's padding alone showed)
SWIPE = (".dl-batch::before{content:'⟷ swipe sideways: the batch is wider than the screen';display:block;"
         "position:sticky;left:0;font-size:0.75rem;color:#555}")


def padded_batch_html(pieces: tuple[tuple[str, ...], ...], input_ids, attention_mask) -> str:
    """A left-padded batch as a grid that fits the page's width: one row per prompt, one column per position,
    each cell its token (id under it), padding grey like every masked thing. Cells wrap their text instead of
    pushing the last positions off the right edge; on a phone the grid scrolls sideways (ui/style.py)."""
    n = max((len(r) for r in pieces), default=0)
    head = ["<div class='dl-batch-h'></div>"] + [f"<div class='dl-batch-h'>pos {p}</div>" for p in range(n)]
    cells = []
    for b, row_pieces in enumerate(pieces):
        cells.append(f"<div class='dl-batch-h'>batch {b}</div>")
        for p, piece in enumerate(row_pieces):
            tid = int(input_ids[b, p])
            pad = int(attention_mask[b, p]) == 0
            text = "PAD" if pad else html.escape(show_piece(piece))
            colour = MASKED if pad else PREFILL + "22"
            cells.append(f"<div data-role='{'pad' if pad else 'token'}' data-pos='{p}' data-row='{b}' title='{text}' "
                         f"style='background:{colour}'><span>{text}</span><br><small>{tid}</small></div>")
    # a token on one line, cut with "…" where its column is narrow (whole in the tooltip): never broken mid-word
    style = ("<style>.dl-batch{overflow-x:auto}.dl-batch>div{display:grid;gap:2px;font-size:0.78rem;"
             "line-height:1.25}.dl-batch>div>div{padding:3px 4px;border-radius:4px;white-space:nowrap;overflow:hidden;"
             "text-overflow:ellipsis;font-family:monospace;min-width:0}.dl-batch>div>div>span{display:inline-block;"
             "max-width:100%;overflow:hidden;text-overflow:ellipsis;vertical-align:bottom}"
             ".dl-batch small{color:#666;font-size:11px}.dl-batch .dl-batch-h{color:#666;"
             "font-family:inherit;background:none}@media (max-width:700px){.dl-batch>div{min-width:"
             f"{60 + 52 * n}px}}" + (SWIPE if 60 + 52 * n > PHONE_COLUMN_PX else "") + "}</style>")
    grid = (f"<div style='grid-template-columns:4.2em repeat({n}, minmax(0, 1fr))'>"
            + "".join(head + cells) + "</div>")
    return f"{style}<div class='dl-batch' data-testid='dl-batch'>{grid}</div>"


def batch_attention(run, row: int, layer: int = 0, head: int = 0) -> np.ndarray:
    """One row of a padded batch (engine.generate.batch.BatchRun): its prefill attention [query_pos, key_pos], NaN
    where the mask forbids the pair (a later key, or a padded one): masked, not zero, as the stage draws it. A padding
    query has every key masked."""
    w = run.prefill_attention[layer, row, head].numpy().astype(float)
    q, k = np.arange(w.shape[0])[:, None], np.arange(w.shape[1])[None, :]
    padded = (run.attention_mask[row] == 0).numpy()
    w[(k > q) | padded[None, :] | padded[:, None]] = np.nan
    return w


def batch_shapes_frame(shapes: tuple[tuple[str, tuple[int, ...]], ...]) -> pd.DataFrame:
    """A batch run's tensors and their shapes (engine.generate.batch.BatchRun.shapes): batch comes first."""
    return pd.DataFrame([(name, str(list(shape))) for name, shape in shapes], columns=["tensor", "shape [batch, ...]"])
