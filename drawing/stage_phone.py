"""The stage laid out for a phone: the same pass, the same record, drawn 420 units wide so that it fits a 390 px
screen whole, with no word under 11 px.

The wide stage (drawing/stage.py) is 1000 units wide; on a phone its words fell to 6-8 px, and the picture had to
scroll: opened at its left end, the new K/V column and the next token were off screen; opened at its right end, its
title and layer buttons were. This one stacks what the wide one puts side by side:

    title                       (wrapped: nothing cut)
    the token strip             (wrapped, the middle elided past three rows), then "next:" and the chosen token
    fed: q_len · kv_len
    the layers as a row of buttons, the opened one filled
    x, and the three projections (each with its shape and where it goes)
    K and V grids               one column per position, the newest outlined, written by this pass
    q·Kᵀ → softmax              the query rows over the same columns (masked pairs hatched)
    softmax · V → out, keys read
    LM head                     the top logits, the rule, the chosen token
    what this pass computed and cost

Every element a test may count carries the wide stage's data-role, so both are read the same way.
"""

from __future__ import annotations

from html import escape

from drawing.palette import DECODE, NEW, PREFILL, RECOMPUTED, show_piece
from drawing.stage import (
    _col_kind,
    cache_column,
    caption,
    caption_lines,
    score_rows,
    stage_heading,
    stage_html,
    stage_svg,
)
from drawing.svg import FONT, INK, MONO, QCOL, SOFT, TEXT, arrow, defs, mono_fit, mono_width, shape_text, text_width
from drawing.svg import text as _t
from engine.forward.trace import StepTrace

NW = 420  # viewBox width: at 370 px (a 390 px phone's column) 0.88 px a unit, so 11-unit text is 11.8 px
MIN_SIZE = 11  # the smallest font size used (before svg.TEXT): >= 11 px on a 390 px phone
GX0, GX1 = 76, NW - 6  # the key columns (K, V and the scores share them); kv_head labels left of GX0
MAX_STRIP_ROWS = 3


def wrap(text: str, size: float, width: float, bold: bool = False, mono: bool = False) -> list[str]:
    """Words in lines no wider than `width` at `size` (a word longer than the line keeps a line of its own)."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and text_width(lines[-1] + " " + word, size, bold, mono) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def title_lines(text: str, size: float, width: float, bold: bool = True, mono: bool = False,
                sep: str = " · ") -> list[str]:
    """A title in lines, broken between its " · " parts (or `sep`'s) where it can (never "step / 30"), else between
    words."""
    lines: list[str] = []
    for part in text.split(sep):
        if lines and text_width(lines[-1] + sep + part, size, bold, mono) <= width:
            lines[-1] += sep + part
        elif lines:
            lines[-1] += sep.rstrip()
            lines.extend(wrap(part, size, width, bold, mono))
        else:
            lines.extend(wrap(part, size, width, bold, mono))
    return lines


def _lines(x: float, y: float, text: str, size: float, width: float, **kw) -> tuple[str, float]:
    """`text` wrapped to `width`, its first baseline at y; (svg, height used)."""
    step = size * TEXT * 1.25
    rows = wrap(text, size, width, kw.get("weight") == "bold")
    return "".join(_t(x, y + i * step, row, size, **kw) for i, row in enumerate(rows)), len(rows) * step


# ---------------------------------------------------------------- the token strip


def _strip(t: StepTrace, pieces: list[str], prompt_len: int, y: float, rejected_from: int | None) -> tuple[str, float]:
    """Chips for the positions 0..kv_len-1 in rows, then "next:" and the chosen token; (svg, height)."""
    size, pad, h, gap, row_h = 14, 10, 28, 4, 34
    n = t.kv_len
    fed = set(range(t.past, t.past + t.q_len))
    chip_w = [min(NW / 2, mono_width(show_piece(p), size) + pad) for p in pieces[:n]]
    token = show_piece(t.token)
    short, id_text = len(token) <= 2, f"id {t.token_id}"  # ".", "·a": its id beside it, so the chip is not empty
    chosen_w = min(NW - 60, max(60.0, mono_width(token, 16) + pad + (mono_width(id_text, MIN_SIZE) + 6 if short else 0)))
    next_w = text_width("next:", 12, True) + 6 + chosen_w  # the label and its chip stay together

    def layout(shown: list[int]) -> list[tuple[int, float, int]]:
        """(position or -1 for the gap or -2 for next, x, row) of each item."""
        items, x, row = [], 0.0, 0
        for p in shown + [-2]:
            w = next_w if p == -2 else (gap_w(shown) if p == -1 else chip_w[p])
            if x > 0 and x + w > NW:
                x, row = 0.0, row + 1
            items.append((p, x, row))
            x += w + gap
        return items

    def gap_w(shown: list[int]) -> float:
        return text_width(gap_text(shown), 11) + 8

    def gap_text(shown: list[int]) -> str:
        i = shown.index(-1)
        return f"… {shown[i + 1] - shown[i - 1] - 1} more …"

    shown = list(range(n))
    items = layout(shown)
    if items[-1][2] >= MAX_STRIP_ROWS and n > 4:  # keep the start and the end; elide the middle
        for keep in range(n - 3, 0, -1):
            shown = [0, 1, -1] + list(range(n - keep, n))
            if n - keep <= 2:
                shown = list(range(n))
            items = layout(shown)
            if items[-1][2] < MAX_STRIP_ROWS:
                break
    out = []
    for p, x, row in items:
        cy = y + row * row_h
        if p == -1:
            out.append(_t(x + gap_w(shown) / 2, cy + 19, gap_text(shown), 11, "middle", SOFT))
        elif p == -2:
            out.append(_t(x, cy + 19, "next:", 12, fill=NEW, weight="bold"))
            cx = x + text_width("next:", 12, True) + 6
            out.append(f'<g data-role="chosen-chip"><rect x="{cx:.1f}" y="{cy:.1f}" width="{chosen_w:.1f}" '
                       f'height="{h}" rx="5" fill="{NEW}" fill-opacity="0.15" stroke="{NEW}" stroke-width="2.5" '
                       f'stroke-dasharray="5 3"/>'
                       + (_t(cx + 6, cy + 20, token, 16, family=MONO, weight="bold")
                          + _t(cx + chosen_w - 5, cy + 19, id_text, MIN_SIZE, "end", SOFT, family=MONO) if short else
                          _t(cx + chosen_w / 2, cy + 20, token, max(MIN_SIZE, mono_fit(token, 16, chosen_w - pad)),
                             "middle", family=MONO, weight="bold")) + '</g>')
        else:
            w = chip_w[p]
            colour = PREFILL if p < prompt_len else DECODE
            is_fed = p in fed
            rejected = rejected_from is not None and p >= rejected_from
            stroke = f'stroke="{NEW}" stroke-width="3"' if is_fed else 'stroke="none"'
            piece = show_piece(pieces[p])
            out.append(
                f'<g data-role="token" data-pos="{p}" data-fed="{int(is_fed)}" data-rejected="{int(rejected)}">'
                f'<rect x="{x:.1f}" y="{cy:.1f}" width="{w:.1f}" height="{h}" rx="5" fill="{colour}" '
                f'fill-opacity="{0.12 if rejected else 0.22}" {stroke}/>'
                + _t(x + w / 2, cy + 19, piece, max(MIN_SIZE, mono_fit(piece, size, w - pad)), "middle",
                     SOFT if rejected else INK, family=MONO,
                     extra='text-decoration="line-through"' if rejected else "")
                + '</g>')
    height = (items[-1][2] + 1) * row_h
    fed_txt = f"fed: {t.q_len} position{'s' if t.q_len != 1 else ''} (q_len = {t.q_len}) · kv_len = {t.kv_len}"
    if t.recomputed:
        fed_txt += f" · {t.recomputed} already known"
    said, fh = _lines(0, y + height + 14, fed_txt, 12, NW, fill=NEW if t.q_len == 1 else INK, weight="bold")
    return "".join(out) + said, height + fh + 4


# ---------------------------------------------------------------- the layers, as a row of buttons


def _layers(n_layers: int, opened: int, y: float) -> tuple[str, float]:
    """The layers as a row of buttons, the opened one filled; past what fits, the ones nearest the opened one."""
    size, pad, gap, h = 12, 14, 5, 28
    width = {layer: text_width(f"layer {layer}", size, layer == opened) + pad for layer in range(n_layers)}
    wanted = [opened, 0, n_layers - 1, opened - 1, opened + 1, opened - 2, opened + 2, 1, n_layers - 2]
    wanted += list(range(n_layers))
    shown: list[int] = []
    for layer in wanted:
        if 0 <= layer < n_layers and layer not in shown:
            trial = sorted(shown + [layer])
            gaps = sum(1 for a, b in zip(trial, trial[1:]) if b - a > 1)
            if sum(width[x] for x in trial) + gap * (len(trial) + gaps) + 16 * gaps <= NW:
                shown = trial
    out, x, prev = [], 0.0, None
    for layer in shown:
        if prev is not None and layer - prev > 1:
            out.append(_t(x + 8, y + 19, "⋯", 14, "middle", SOFT))
            x += 16 + gap
        is_open = layer == opened
        out.append(f'<g data-role="layer" data-layer="{layer}" data-open="{int(is_open)}">'
                   f'<rect x="{x:.1f}" y="{y:.1f}" width="{width[layer]:.1f}" height="{h}" rx="6" '
                   f'fill="{"#e8eef7" if is_open else "#fafafa"}" stroke="{PREFILL if is_open else "#bbb"}" '
                   f'stroke-width="{2.5 if is_open else 1}"/>'
                   + _t(x + width[layer] / 2, y + 19, f"layer {layer}", size, "middle",
                        weight="bold" if is_open else "normal") + '</g>')
        x += width[layer] + gap
        prev = layer
    return "".join(out), h + 8


# ---------------------------------------------------------------- one layer opened


def _columns(kv_len: int) -> tuple[list[float], float]:
    width = min((GX1 - GX0) / max(1, kv_len), 40)
    return [GX0 + p * width for p in range(kv_len)], width


def _projections(t: StepTrace, lt, y: float) -> tuple[str, float]:
    """x and its three projections, one under the other, each with its shape and where it goes."""
    out = []
    x_shape = lt.shapes.get("resid_in")
    out.append(f'<rect x="0" y="{y:.1f}" width="{NW}" height="46" rx="6" fill="#f5f5f5" stroke="#bbb"/>')
    out.append(_t(8, y + 20, "x", 16, weight="bold"))
    out.append(_t(26, y + 20, shape_text(x_shape), 13, family=MONO))
    rows = f"{t.q_len} row{'s' if t.q_len != 1 else ''} in"
    out.append(_t(NW - 8, y + 20, rows, 12, "end", NEW, weight="bold"))
    out.append(_t(8, y + 39, "[batch, pos, d_model]", MIN_SIZE, fill=SOFT))
    y += 54
    src = "" if lt.measured else " (derived)"
    lines = [("q", "W_q", lt.shapes.get("attn.q"), QCOL, "used once, then dropped"),
             ("k", "W_k", lt.shapes.get("attn.k"), PREFILL, "→ K cache" if t.use_cache else "recomputed, not kept"),
             ("v", "W_v", lt.shapes.get("attn.v"), PREFILL, "→ V cache" if t.use_cache else "recomputed, not kept")]
    for name, w, shape, colour, note in lines:
        label, shape_s = f"{w} → {name}", shape_text(shape) + src
        box_w = 8 + text_width(label, 14, True) + 8 + mono_width(shape_s, 12) + 8
        dash = ' stroke-dasharray="5 4"' if name == "q" else ""
        out.append(f'<g data-role="proj-{name}"><rect x="0" y="{y:.1f}" width="{box_w:.1f}" height="26" rx="5" '
                   f'fill="{colour}" fill-opacity="0.09" stroke="{colour}" stroke-width="1.8"{dash}/>'
                   + _t(8, y + 18, label, 14, fill=colour, weight="bold")
                   + _t(16 + text_width(label, 14, True), y + 18, shape_s, 12, family=MONO) + '</g>')
        fill = RECOMPUTED if "recomputed" in note else (QCOL if name == "q" else SOFT)
        if box_w + 6 + text_width(note, MIN_SIZE) <= NW:
            out.append(_t(box_w + 6, y + 18, note, MIN_SIZE, fill=fill))
            y += 31
        else:
            out.append(_t(8, y + 42, note, MIN_SIZE, fill=fill))
            y += 50
    return "".join(out), y


def _position_labels(pieces: list[str], n: int, y: float) -> tuple[str, float]:
    xs, cw = _columns(n)
    if cw < 30:
        return _t(GX0, y + 14, f"key_pos 0 … {n - 1} (a column each)", MIN_SIZE, fill=SOFT), 20
    return "".join(_t(x + cw / 2, y + 14, (show_piece(pieces[p]) if p < len(pieces) else "")[:3], MIN_SIZE, "middle",
                      SOFT, family=MONO) for p, x in enumerate(xs)), 20


def _kv_grid(name: str, t: StepTrace, lt, prompt_len: int, y: float, kv_heads: int, highlight: int,
             rejected_from: int | None) -> tuple[str, float]:
    """Its label line, then one column per position and one row per kv_head (up to 4); the new columns outlined."""
    xs, cw = _columns(t.kv_len)
    shown_heads = min(kv_heads, 4)
    ch = 16 if shown_heads > 2 else 22
    shape = lt.shapes.get(f"kv.{'keys' if name == 'K' else 'values'}")
    out = []
    if t.use_cache:
        title = f"{name} cache"
        note = f"window {lt.window}: keeps {lt.window - 1}" if lt.window is not None else "kept for later steps"
        out.append(_t(0, y + 16, title, 14, weight="bold"))
        x = text_width(title, 14, True) + 8
        out.append(_t(x, y + 16, shape_text(shape), 12, family=MONO))
        x += mono_width(shape_text(shape), 12) + 8
        if x + text_width(note, MIN_SIZE) <= NW:
            out.append(_t(x, y + 16, note, MIN_SIZE, fill=SOFT))
            y += 24
        else:
            out.append(_t(0, y + 34, note, MIN_SIZE, fill=SOFT))
            y += 42
    else:
        out.append(_t(0, y + 16, f"{name}, no cache", 14, weight="bold"))
        said, hh = _lines(0, y + 34, "computed for every position, then thrown away", MIN_SIZE, NW, fill=RECOMPUTED)
        out.append(said)
        y += 20 + hh
    y += 16  # room for this pass's write marker: its head reaches ~16 units up from its tip, clear of the note
    new_cols = []
    for p, x in enumerate(xs):
        kind, new = _col_kind(p, t, prompt_len, lt, rejected_from)
        if new and kind in ("prefill", "decode", "recomputed", "cut"):
            new_cols.append(x)
        out.append(cache_column(name, p, kind, new, x, y, cw, ch, shown_heads, highlight))
    if t.kv_len:  # the columns this pass wrote: a green marker over them
        x0 = xs[t.past] if (t.use_cache or t.phase == "prefill") and t.past < len(xs) else xs[-1]
        x1 = xs[-1] + cw
        mid = (x0 + x1) / 2
        out.append(f'<g data-role="write-{name.lower()}"><line x1="{x0 + 1:.1f}" y1="{y - 8:.1f}" x2="{x1 - 1:.1f}" '
                   f'y2="{y - 8:.1f}" stroke="{NEW}" stroke-width="2"/>'
                   + arrow(mid, y - 8, mid, y - 1, NEW, "arrow-new", width=2.5) + '</g>')
    for h in range(shown_heads):
        out.append(_t(GX0 - 5, y + h * ch + ch - 5, f"kv_head {h}", MIN_SIZE, "end", INK if h == highlight else SOFT))
    grid_h = shown_heads * ch
    if kv_heads > shown_heads:
        out.append(_t(GX0 - 5, y + grid_h + 12, f"+{kv_heads - shown_heads} more", MIN_SIZE, "end", SOFT))
        grid_h += 14
    return "".join(out), y + grid_h + 8


def _scores(t: StepTrace, lt, head: int, kv_head: int, pieces: list[str], y: float,
            rejected_from: int | None) -> tuple[str, float]:
    xs, cw = _columns(t.kv_len)
    q_rows = list(range(t.past, t.kv_len))
    out = [_t(0, y + 16, "q·Kᵀ → softmax", 14, weight="bold"),
           _t(text_width("q·Kᵀ → softmax", 14, True) + 8, y + 16, f"head {head} (reads kv_head {kv_head})", MIN_SIZE,
              fill=SOFT)]
    newest = show_piece(pieces[t.kv_len - 1]) if t.kv_len - 1 < len(pieces) else ""
    if len(q_rows) == 1:
        who, colour, family = f"query: {newest[:14]}", NEW, MONO
    elif t.recomputed:
        who, colour, family = f"{t.recomputed} rows recomputed", RECOMPUTED, FONT
    else:
        who, colour, family = f"{len(q_rows)} query rows", NEW, FONT
    out.append(_t(0, y + 36, who, MIN_SIZE, fill=colour, family=family))
    y += 46
    rh = max(2.0, min(22.0, 100 / max(1, len(q_rows))))
    out.append(score_rows(t, lt, head, q_rows, xs, cw, y, rh, rejected_from))  # the wide stage's own rows
    y += max(len(q_rows) * rh, 22) + 4
    return "".join(out), y


def _panel(t: StepTrace, pieces: list[str], prompt_len: int, layer: int, head: int, y: float,
           rejected_from: int | None) -> tuple[str, float]:
    lt = t.layers[layer]
    q_shape, k_shape = lt.shapes.get("attn.q"), lt.shapes.get("attn.k")
    heads = q_shape[1] if q_shape else 1
    kv_heads = k_shape[1] if k_shape else 1
    kv_head = head // max(1, heads // kv_heads)
    out = []
    proj, y = _projections(t, lt, y)
    out.append(proj)
    labels, lh = _position_labels(pieces, t.kv_len, y)
    out.append(labels)
    y += lh
    for name in ("K", "V"):
        grid, y = _kv_grid(name, t, lt, prompt_len, y, kv_heads, kv_head, rejected_from)
        out.append(grid)
    scores, y = _scores(t, lt, head, kv_head, pieces, y, rejected_from)
    out.append(scores)
    nxt = f"layer {layer + 1}" if layer + 1 < len(t.layers) else "the final norm"
    x_shape = lt.shapes.get("resid_in")
    said, h = _lines(0, y + 14, f"softmax · V → out {shape_text(tuple(x_shape) if x_shape else None)} → {nxt}", 12,
                     NW)
    out.append(said)
    y += h
    window = f" (window {lt.window})" if lt.window else ""
    out.append(_t(NW, y + 12, f"keys read: {lt.kv_len}{window}", MIN_SIZE, "end", SOFT))
    return "".join(out), y + 20


# ---------------------------------------------------------------- the LM head


def _head(t: StepTrace, y: float) -> tuple[str, float]:
    out = [_t(0, y + 16, f"LM head → logits {shape_text(t.logits_shape)}", 13, weight="bold")]
    y += 24
    rule = t.rule.split(":")[0].split(" (")[0]
    chosen = show_piece(t.token)
    tail_w = text_width(f"→ {rule} →", 12) + 8 + mono_width(chosen, 14) + 4
    x = 0.0
    for i, c in enumerate(t.top[:5]):
        label = f"{show_piece(c.token)} {c.logit:.1f}"
        w = min(150.0, mono_width(label, 12) + 12)
        if x + w + 6 + (tail_w if i < 3 else 0) > NW and i > 0:
            break
        is_chosen = c.token_id == t.token_id
        out.append(f'<g data-role="logit" data-chosen="{int(is_chosen)}"><rect x="{x:.1f}" y="{y:.1f}" '
                   f'width="{w:.1f}" height="26" rx="4" fill="{NEW if is_chosen else "#eee"}" '
                   f'fill-opacity="{0.25 if is_chosen else 1}" stroke="{NEW if is_chosen else "none"}" '
                   f'stroke-width="2"/>'
                   + _t(x + w / 2, y + 18, label, max(MIN_SIZE, mono_fit(label, 12, w - 8)), "middle", family=MONO)
                   + '</g>')
        x += w + 6
    if x + tail_w > NW:
        x, y = 0.0, y + 32
    out.append(_t(x, y + 18, f"→ {rule} →", 12, fill=SOFT))
    x += text_width(f"→ {rule} →", 12) + 8
    out.append('<g data-role="chosen">' + _t(x, y + 18, chosen, max(MIN_SIZE, mono_fit(chosen, 14, NW - x)),
                                              weight="bold", fill=NEW, family=MONO) + '</g>')
    return "".join(out), y + 34


def heading(t: StepTrace, title: str | None = None) -> str:
    return title or stage_heading(t)


def phone_stage_svg(t: StepTrace, pieces: list[str], prompt_len: int, layer: int = 0, head: int = 0,
                    rejected_from: int | None = None, title: str | None = None) -> str:
    """The stage of one traced pass, 420 units wide (drawing/stage.py's stage_svg, laid out for a phone)."""
    layer = max(0, min(layer, len(t.layers) - 1))
    lt = t.layers[layer]
    q_shape = lt.shapes.get("attn.q")
    heads = q_shape[1] if q_shape else (lt.pattern.shape[0] if lt.pattern is not None else 1)
    head = max(0, min(head, heads - 1))
    rows = title_lines(heading(t, title), 16, NW)
    body = [_t(0, 20 + i * 16 * TEXT * 1.25, row, 16, weight="bold") for i, row in enumerate(rows)]
    y = len(rows) * 16 * TEXT * 1.25 + 8
    strip, sh = _strip(t, pieces, prompt_len, y, rejected_from)
    body.append(strip)
    y += sh + 6
    layers, lh = _layers(len(t.layers), layer, y)
    body.append(layers)
    y += lh + 4
    panel, y = _panel(t, pieces, prompt_len, layer, head, y, rejected_from)
    body.append(panel)
    body.append(f'<line x1="0" y1="{y:.1f}" x2="{NW}" y2="{y:.1f}" stroke="#ddd"/>')
    head_svg, y = _head(t, y + 6)
    body.append(head_svg)
    first, second = caption_lines(t)
    a, ah = _lines(0, y + 14, first, 12, NW, weight="bold")
    b, bh = _lines(0, y + 14 + ah, second, 12, NW)
    body.append(f'<g data-role="caption">{a}{b}</g>')
    height = y + ah + bh + 10
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {NW} {height:.0f}" width="100%" '
            f'role="img" aria-label="{escape(caption(t))}" data-role="stage" data-layout="phone" '
            f'data-phase="{t.phase}" data-step="{t.step}" data-cache="{int(t.use_cache)}" style="max-height:100%">'
            + defs() + "".join(body) + '</svg>')



def stage_pictures(t: StepTrace, pieces: list[str], prompt_len: int, layer: int = 0, head: int = 0,
                   rejected_from: int | None = None, title: str | None = None) -> str:
    """The stage as a page places it: the wide picture, and this layout where the screen is a phone's."""
    args = (t, list(pieces), prompt_len, layer, head, rejected_from, title)
    return stage_html(stage_svg(*args), caption(t), phone=phone_stage_svg(*args))
