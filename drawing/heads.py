"""Every head of one layer for the newest query, as a picture: [head, key_pos], one row per head.

The same numbers as figures.heads_figure (the plotly heatmap the step page draws), drawn as an SVG
for an <img>: a follower's tab redraws it in a few milliseconds, where a plotly heatmap costs its
browser ~150 ms a step, and thirty students' tabs follow each click. Each cell prints its weight
when there is room; masked pairs are hatched (masked, not zero).
"""

from __future__ import annotations

import math

from drawing.attention import newest_query
from drawing.palette import show_piece
from drawing.svg import INK, MONO, SOFT, TEXT, blues, defs, mono_fit, mono_width, text
from engine.forward.trace import StepTrace

W = 560  # viewBox width: drawn for a side column, so that its text reads at the stage's size
LEFT, MOST_LEFT = 70, 210  # row labels: "head 3", or "head 3 · previous token" where roles are named
RIGHT = 24  # room for the last key's turned label
SANS_EM = 0.54  # a sans-serif glyph's mean advance, in font sizes ("looks at ·named" in DejaVu Sans: ~0.5)


def heads_svg(t: StepTrace, layer: int, pieces: list[str], roles: dict[int, str] | None = None) -> str:
    """`pieces`: the text of every position 0..kv_len-1. One row per head: the newest query's weights. `roles`: head
    -> what it does in this row (drawing.views.role_names), beside its number, as the step page's chart names it."""
    rows = newest_query(t, layer)  # [head, key_pos], NaN where masked
    heads, n = rows.shape[0], max(1, t.kv_len)
    names = [f"head {h}" + (f" · {roles[h]}" if roles and roles.get(h) else "") for h in range(heads)]
    per_char = 12 * TEXT * SANS_EM
    left = min(MOST_LEFT, max(LEFT, 6 + per_char * max(map(len, names))))
    fits = int((left - 6) / per_char)
    names = [name if len(name) <= fits else name[: fits - 1] + "…" for name in names]  # cut, and seen to be
    cell_w = (W - left - RIGHT) / n
    cell_h = 26
    label_h = 60  # the key pieces, turned
    query = show_piece(pieces[t.kv_len - 1]) if t.kv_len else ""
    body = [text(0, 20, f"layer {layer}, every head · query_pos {t.kv_len - 1} ({query})", 14, weight="bold")]
    top = 30 + label_h
    for p in range(t.kv_len):  # key_pos labels, turned so that long pieces fit
        x = left + (p + 0.5) * cell_w
        piece = show_piece(pieces[p])
        piece = piece if len(piece) <= 10 else piece[:9] + "…"  # cut, and seen to be: "<|endofte…"
        size = min(12.0, mono_fit(piece, 12.0, label_h - 6), cell_w * 0.9 / TEXT)
        body.append(text(x + size * 0.4, top - 6, piece, size, family=MONO, fill=INK,
                         extra=f'transform="rotate(-60 {x + size * 0.4:.1f} {top - 6:.1f})"'))
    show_values = cell_w >= mono_width(".00", 10) + 3  # a weight printed where its cell holds it
    for h, row in enumerate(rows):
        y = top + h * cell_h
        body.append(text(left - 6, y + cell_h * 0.68, names[h], 12, anchor="end", fill=SOFT))
        for p, w in enumerate(row):
            x = left + p * cell_w
            if math.isnan(w):
                body.append(f'<rect x="{x:.1f}" y="{y}" width="{cell_w:.1f}" height="{cell_h}" fill="url(#masked)" '
                            'stroke="#fff"/>')
                continue
            body.append(f'<rect x="{x:.1f}" y="{y}" width="{cell_w:.1f}" height="{cell_h}" fill="{blues(w)}" '
                        'stroke="#fff"/>')
            if show_values:
                ink = "#fff" if w > 0.45 else INK
                body.append(text(x + cell_w / 2, y + cell_h * 0.66, f"{w:.2f}".lstrip("0"), 10, anchor="middle",
                                 fill=ink, family=MONO))
    y = top + heads * cell_h + 22
    body.append(text(0, y, "a row sums to 1 · white 0 → deep blue 1 · hatched: masked", 11, fill=SOFT))
    height = y + 10
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height}" width="{W}" height="{height}" '
            f'font-family="sans-serif">{defs()}{"".join(body)}</svg>')
