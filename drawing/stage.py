"""The stage: one picture of one forward pass, drawn from its trace (an SVG string).

    tokens   the strip of positions; the ones fed to this pass boxed (s at prefill, 1 at a cached decode,
             all n at a decode with the cache off); the chosen token at the end, fed back next step
    layers   a column of layers; one opened up:
               x [batch, q_len, d_model] ─ W_q → q   used once by this pass, then dropped
                                         ├ W_k → k ─┐ written into the layer's K cache  (kept)
                                         └ W_v → v ─┤ written into the layer's V cache  (kept)
               K / V grids: one column per position, one row per kv_head, coloured by the step that
               wrote it; this pass's columns outlined green; recomputed ones red (cache off)
               q·Kᵀ: the query rows scoring every key (weights as intensity; masked pairs hatched grey)
               softmax·V → out [batch, q_len, d_model] → next layer
    LM head  logits of the last position (raw values), the rule, the chosen token, back into the strip
    caption  q_len, kv_len, FLOPs and bytes (estimates), measured time

Prefill, cached decode and cache-off decode use the same layout, so the difference between
them is the *shape* of the picture. Every element a test may count carries data-role.
Nothing typed by a user reaches the SVG unescaped.
"""

from __future__ import annotations

from html import escape

from drawing.attention import visible
from drawing.palette import DECODE, NEW, PREFILL, RECOMPUTED, show_piece
from drawing.svg import (
    FONT,
    GRID_X0,
    GRID_X1,
    INK,
    LABEL_X,
    LOOP_X,
    MONO,
    QCOL,
    SOFT,
    TEXT,
    W,
    arrow,
    data_uri,
    defs,
    mono_fit,
    mono_width,
    shape_text,
    text_width,
)
from drawing.svg import blues as _blues
from drawing.svg import text as _t
from engine.forward.trace import StepTrace
from physics.units import human_bytes, human_flops

# ---------------------------------------------------------------- the token strip

CHOSEN_MIN_W = 84  # the "next:" chip is never a sliver, even for one character (a stop string's "."): id beside it
SHORT_SIZE = 24.0  # a one- or two-character token is drawn larger, so "next: ." is not a nearly empty box
PHASE_NAMES = {"prefill": "Prefill (initiation phase)", "decode": "Decode (generation phase)"}  # the phases' other names


def _strip(t: StepTrace, pieces: list[str], prompt_len: int, y: float, rejected_from: int | None) -> tuple[str, float, tuple]:
    """Chips for the positions 0..kv_len-1 and the chosen token; returns (svg, height, chosen chip centre)."""
    out = []
    n = t.kv_len
    fed = set(range(t.past, t.past + t.q_len))
    size, pad = 17, 12
    widths = [min(190, mono_width(show_piece(p), size) + pad) for p in pieces[:n]]
    short = len(show_piece(t.token)) <= 2  # ".", "·a": drawn large, with its id beside it, so the chip is not empty
    id_text = f"id {t.token_id}"
    if short:  # the token, a gap, its id: side by side, never one over the other ("·a" over "id 259")
        chosen_w = max(CHOSEN_MIN_W, pad + mono_width(show_piece(t.token), SHORT_SIZE) + 8 + mono_width(id_text, 11))
    else:
        chosen_w = min(230, max(CHOSEN_MIN_W, mono_width(show_piece(t.token), size) + pad))  # <|endoftext|> whole
    avail = W - chosen_w - 90
    # keep the start and the end of the sequence; elide the middle if it does not fit on two lines
    shown = list(range(n))
    if sum(widths) + 4 * n > 2 * avail:
        head, tail, room = [], [], 2 * avail - 110  # 110: the gap's words
        for p in range(min(3, n)):
            head.append(p)
            room -= widths[p] + 4
        for p in range(n - 1, len(head) - 1, -1):
            if room - widths[p] - 4 < 0:
                break
            tail.insert(0, p)
            room -= widths[p] + 4
        shown = head + [-1] + tail
    x, row, rows_y = 0.0, 0, [y, y + 40]
    chips = []
    gap = f"… {shown[shown.index(-1) + 1] - shown[shown.index(-1) - 1] - 1} more …" if -1 in shown else ""
    gap_w = text_width(gap, 12) + 8  # its own width (a proportional font): it never runs over a chip
    for p in shown:
        w = gap_w if p == -1 else widths[p]
        if x + w > avail and row == 0:
            x, row = 0.0, 1
        cy = rows_y[row]
        if p == -1:
            chips.append(_t(x + w / 2, cy + 22, gap, 12, "middle", SOFT))
        else:
            colour = PREFILL if p < prompt_len else DECODE
            is_fed = p in fed
            rejected = rejected_from is not None and p >= rejected_from
            stroke = f'stroke="{NEW}" stroke-width="3"' if is_fed else 'stroke="none"'
            chips.append(
                f'<g data-role="token" data-pos="{p}" data-fed="{int(is_fed)}" data-rejected="{int(rejected)}">'
                f'<rect x="{x:.1f}" y="{cy:.1f}" width="{w:.1f}" height="32" rx="5" fill="{colour}" '
                f'fill-opacity="{0.12 if rejected else 0.22}" {stroke}/>'
                + _t(x + w / 2, cy + 23, show_piece(pieces[p]), mono_fit(show_piece(pieces[p]), size, w - pad), "middle",
                     SOFT if rejected else INK, family=MONO, extra='text-decoration="line-through"' if rejected else "")
                + (f'<line x1="{x + 3:.1f}" y1="{cy + 16:.1f}" x2="{x + w - 3:.1f}" y2="{cy + 16:.1f}" stroke="{RECOMPUTED}" stroke-width="2.5"/>'
                   if rejected else "")
                + '</g>')
        x += w + 4
    out += chips
    # the chosen token: dashed, it is not in the sequence yet; it will be fed next step
    cx, cy = W - chosen_w - 10, rows_y[0]
    token = (_t(cx + pad / 2, cy + 23, show_piece(t.token), SHORT_SIZE, "start", family=MONO, weight="bold")
             + _t(cx + chosen_w - 5, cy + 21, id_text, 11, "end", SOFT, family=MONO)) if short else \
        _t(cx + chosen_w / 2, cy + 23, show_piece(t.token), mono_fit(show_piece(t.token), size, chosen_w - pad), "middle",
           family=MONO)
    out.append(f'<g data-role="chosen-chip"><rect x="{cx:.1f}" y="{cy:.1f}" width="{chosen_w:.1f}" height="32" rx="5" '
               f'fill="{NEW}" fill-opacity="0.15" stroke="{NEW}" stroke-width="2.5" stroke-dasharray="5 3"/>'
               + token + '</g>')
    out.append(_t(cx - 8, cy + 22, "next:", 13, "end", NEW, weight="bold"))
    height = 40 * (row + 1)
    fed_txt = f"fed: {t.q_len} position{'s' if t.q_len != 1 else ''} (q_len = {t.q_len}) · kv_len = {t.kv_len}"
    if t.recomputed:
        fed_txt += f" · {t.recomputed} already known"
    out.append(_t(0, y + height + 18, fed_txt, 15, fill=NEW if t.q_len == 1 else INK, weight="bold"))
    return "".join(out), height + 30, (cx + chosen_w / 2, cy + 32)


# ---------------------------------------------------------------- the layer column


def _layers(n_layers: int, opened: int, y0: float, y1: float) -> str:
    """The layers as a column of boxes; the opened one filled and joined to the panel."""
    if n_layers <= 10:
        shown = list(range(n_layers))
    else:
        shown = sorted({0, 1, opened - 1, opened, opened + 1, n_layers - 2, n_layers - 1} & set(range(n_layers)))
    items, prev = [], None
    for layer in shown:
        if prev is not None and layer - prev > 1:
            items.append(None)
        items.append(layer)
        prev = layer
    h = min(50, (y1 - y0) / max(1, len(items)))
    out = []
    for i, layer in enumerate(items):
        y = y0 + i * h
        if layer is None:
            out.append(_t(55, y + h / 2 + 7, "⋮", 18, "middle", SOFT))
            continue
        is_open = layer == opened
        out.append(f'<g data-role="layer" data-layer="{layer}" data-open="{int(is_open)}">'
                   f'<rect x="5" y="{y + 3:.1f}" width="100" height="{h - 6:.1f}" rx="6" '
                   f'fill="{"#e8eef7" if is_open else "#fafafa"}" stroke="{PREFILL if is_open else "#bbb"}" '
                   f'stroke-width="{2.5 if is_open else 1}"/>'
                   + _t(55, y + h / 2 + 7, f"layer {layer}", 15, "middle", weight="bold" if is_open else "normal")
                   + '</g>')
        if is_open:
            out.append(f'<path d="M 105 {y + h / 2:.1f} L 128 {y + h / 2:.1f} L 128 {y0:.1f} L 138 {y0:.1f}" '
                       f'fill="none" stroke="{PREFILL}" stroke-width="2"/>')
    return "".join(out)


# ---------------------------------------------------------------- one layer opened


def _columns(kv_len: int):
    """x of each key position's column (shared by K, V and the scores), and the column width."""
    width = min((GRID_X1 - GRID_X0) / max(1, kv_len), 44)
    return [GRID_X0 + p * width for p in range(kv_len)], width


CELL_FILLS = {"prefill": PREFILL, "decode": DECODE, "recomputed": "url(#recomputed)", "evicted": "#eeeeee",
              "cut": "url(#recomputed)"}


def cache_column(name: str, p: int, kind: str, new: bool, x: float, y: float, cw: float, ch: float,
                 shown_heads: int, highlight: int) -> str:
    """One position's column of the K or V cache: a cell per kv_head, filled by what the position is (`_col_kind`),
    the highlighted head darker, outlined in green where this pass wrote it. The wide stage's and the phone's."""
    cells = []
    for h in range(shown_heads):
        op = 0.9 if h == highlight or kind in ("recomputed", "evicted", "cut") else 0.4
        cells.append(f'<rect x="{x + 0.5:.1f}" y="{y + h * ch:.1f}" width="{max(0.8, cw - 1):.1f}" '
                     f'height="{ch - 2}" fill="{CELL_FILLS[kind]}" fill-opacity="{op}"/>')
    outline = (f'<rect x="{x:.1f}" y="{y - 2:.1f}" width="{cw:.1f}" height="{shown_heads * ch + 2}" fill="none" '
               f'stroke="{NEW}" stroke-width="2.5"/>') if new and kind in ("prefill", "decode") else ""
    return (f'<g data-role="{name.lower()}-col" data-pos="{p}" data-kind="{kind}" data-new="{int(new)}">'
            + "".join(cells) + outline + '</g>')


def _col_kind(p: int, t: StepTrace, prompt_len: int, lt, rejected_from: int | None) -> tuple[str, bool]:
    """(what wrote position p's K/V, was it written by this pass) for the grids."""
    new = t.past <= p < t.kv_len
    if t.use_cache and t.phase != "prefill" and p < t.kv_len - lt.kv_len:
        return "evicted", False  # a sliding-window layer has dropped it: this pass did not read it
    if rejected_from is not None and p >= rejected_from:
        return "cut", True
    if not t.use_cache and t.phase == "decode" and p < t.kv_len - 1:
        return "recomputed", True
    return ("prefill" if p < prompt_len else "decode"), new


def _label_block(lines: list[tuple[str, int, str, str]], y: float) -> str:
    """Left-hand labels of a row: (text, size, colour, family) per line."""
    out, dy = [], 0
    for text, size, colour, family in lines:
        dy += size * TEXT + 3
        out.append(_t(LABEL_X, y + dy - 3, text, size, fill=colour, family=family,
                      weight="bold" if size >= 16 else "normal"))
    return "".join(out)


def _kv_grid(name: str, t: StepTrace, lt, prompt_len: int, y: float, kv_heads: int, highlight: int,
             rejected_from: int | None) -> tuple[str, float]:
    xs, cw = _columns(t.kv_len)
    shown_heads = min(kv_heads, 4)
    ch = 18 if shown_heads > 2 else 26
    shape = lt.shapes.get(f"kv.{'keys' if name == 'K' else 'values'}")
    if t.use_cache:
        lines = [(f"{name} cache", 17, INK, FONT), (shape_text(shape), 13, INK, MONO),
                 ("kept for later steps", 12, SOFT, FONT)]
        if lt.window is not None:
            lines[2] = (f"window {lt.window}: keeps {lt.window - 1}", 12, SOFT, FONT)
    else:
        lines = [(f"{name}, no cache", 17, INK, FONT), ("computed for every", 12, RECOMPUTED, FONT),
                 ("position, then thrown away", 12, RECOMPUTED, FONT)]
    out = [_label_block(lines, y - 4)]
    for p, x in enumerate(xs):
        kind, new = _col_kind(p, t, prompt_len, lt, rejected_from)
        out.append(cache_column(name, p, kind, new, x, y, cw, ch, shown_heads, highlight))
    for h in range(shown_heads):
        out.append(_t(GRID_X0 - 6, y + h * ch + ch - 6, f"kv_head {h}", 11, "end", INK if h == highlight else SOFT))
    if kv_heads > shown_heads:
        out.append(_t(GRID_X0 - 6, y + shown_heads * ch + 10, f"+{kv_heads - shown_heads} more", 11, "end", SOFT))
    evicted = sum(1 for p in range(t.kv_len) if _col_kind(p, t, prompt_len, lt, rejected_from)[0] == "evicted")
    if evicted:
        x_end = xs[evicted - 1] + cw
        out.append(_t((GRID_X0 + x_end) / 2, y + shown_heads * ch / 2 + 5, "left the window", 12, "middle", SOFT))
    return "".join(out), max(shown_heads * ch + 6, 70)


def _position_labels(pieces: list[str], n: int, y: float) -> tuple[str, float]:
    """The token of every key column, above the grids, when the columns are wide enough to read."""
    xs, cw = _columns(n)
    if cw < 11:
        return _t(GRID_X0, y + 16, f"key_pos 0 … {n - 1}  (one column per position)", 12, fill=SOFT), 22
    out = []
    for p, x in enumerate(xs):
        text = show_piece(pieces[p]) if p < len(pieces) else ""
        if cw >= 44:
            out.append(_t(x + cw / 2, y + 16, text[:4], 12, "middle", SOFT, family=MONO))
        else:
            out.append(_t(x + cw / 2 + 4, y + 36, text[:6], min(12, cw * 0.7), "start", SOFT, family=MONO,
                          extra=f'transform="rotate(-55 {x + cw / 2 + 4:.1f} {y + 36:.1f})"'))
    return "".join(out), 22 if cw >= 44 else 40


def score_rows(t: StepTrace, lt, head: int, q_rows: list[int], xs: list[float], cw: float, y: float, rh: float,
               rejected_from: int | None) -> str:
    """One row of cells per query row, one cell per key position: its measured weight as a blue, a masked pair
    hatched (masked is not zero), a recomputed row red, a row a speculative round cut greyed. The wide stage and
    the phone's draw their score rows with this one function (drawing/stage_phone.py)."""
    kept = {}
    if lt.pattern is not None:
        w = lt.pattern[head].float().numpy()
        first = t.kv_len - w.shape[0]
        for i in range(w.shape[0]):
            kept[first + i] = w[i]
    out = []
    for i, q in enumerate(q_rows):
        ry = y + i * rh
        kind = "recomputed" if (not t.use_cache and t.phase == "decode" and q < t.kv_len - 1) else "new"
        if rejected_from is not None and q >= rejected_from:
            kind = "cut"
        cells = []
        for p, x in enumerate(xs):
            if not visible(q, p, lt.window):
                fill, masked = "url(#masked)", 1
            elif kind == "recomputed":
                fill, masked = "url(#recomputed)", 0
            elif q in kept and 0 <= p - lt.key_start < kept[q].shape[0]:
                fill, masked = _blues(float(kept[q][p - lt.key_start])), 0
            else:
                fill, masked = "#f4f4f4", 0
            cells.append(f'<rect x="{x + 0.5:.1f}" y="{ry:.1f}" width="{max(0.8, cw - 1):.1f}" '
                         f'height="{max(1.0, rh - 1):.1f}" fill="{fill}" data-masked="{masked}"/>')
        out.append(f'<g data-role="query-row" data-pos="{q}" data-kind="{kind}">' + "".join(cells) + '</g>')
    return "".join(out)


def _scores(t: StepTrace, lt, head: int, kv_head: int, pieces: list[str], y: float, height: float,
            rejected_from: int | None) -> tuple[str, float]:
    """The query rows scoring every key: weights as intensity, masked pairs hatched, recomputed rows red."""
    xs, cw = _columns(t.kv_len)
    q_rows = list(range(t.past, t.kv_len))  # prefill: s rows; cached decode: 1; cache-off decode: all n
    newest = show_piece(pieces[t.kv_len - 1]) if t.kv_len - 1 < len(pieces) else ""
    lines = [("q·Kᵀ → softmax", 17, INK, FONT), (f"head {head} (reads kv_head {kv_head})", 12, SOFT, FONT)]
    if len(q_rows) == 1:
        lines.append((f"query: {newest[:14]}", 12, NEW, MONO))
    elif t.recomputed:
        lines.append((f"{t.recomputed} rows recomputed", 12, RECOMPUTED, FONT))
    else:
        lines.append((f"{len(q_rows)} query rows", 12, NEW, FONT))
    out = [_label_block(lines, y - 4)]
    rh = max(2.0, min(26.0, height / max(1, len(q_rows))))
    out.append(score_rows(t, lt, head, q_rows, xs, cw, y, rh, rejected_from))
    return "".join(out), max(len(q_rows) * rh, 66)


def _writes(t: StepTrace, name: str, y: float) -> str:
    """A green marker over the columns this pass wrote: the new k (or v) rows sliding into the grid."""
    xs, cw = _columns(t.kv_len)
    if not t.kv_len:
        return ""
    x0, x1 = xs[t.past] if t.use_cache or t.phase == "prefill" else xs[-1], xs[-1] + cw
    mid = (x0 + x1) / 2
    return (f'<g data-role="write-{name}"><line x1="{x0 + 1:.1f}" y1="{y - 9:.1f}" x2="{x1 - 1:.1f}" y2="{y - 9:.1f}" '
            f'stroke="{NEW}" stroke-width="2"/>' + arrow(mid, y - 9, mid, y - 1, NEW, "arrow-new", width=2.5) + '</g>')


def _panel(t: StepTrace, pieces: list[str], prompt_len: int, layer: int, head: int, y: float,
           rejected_from: int | None) -> tuple[str, float]:
    lt = t.layers[layer]
    q_shape, k_shape, v_shape = (lt.shapes.get(k) for k in ("attn.q", "attn.k", "attn.v"))
    heads = q_shape[1] if q_shape else 1
    kv_heads = k_shape[1] if k_shape else 1
    kv_head = head // max(1, heads // kv_heads)
    x_shape = lt.shapes.get("resid_in")
    src = "" if lt.measured else "  (derived)"
    out = []
    # x, and the three projections of its rows
    out.append(f'<rect x="{LABEL_X}" y="{y:.1f}" width="170" height="112" rx="6" fill="#f5f5f5" stroke="#bbb"/>')
    out.append(_t(LABEL_X + 10, y + 26, "x", 18, weight="bold"))
    out.append(_t(LABEL_X + 10, y + 52, shape_text(x_shape), 14, family=MONO))
    out.append(_t(LABEL_X + 10, y + 74, "[batch, pos, d_model]", 11, fill=SOFT))
    out.append(_t(LABEL_X + 10, y + 100, f"{t.q_len} row{'s' if t.q_len != 1 else ''} in", 14, fill=NEW, weight="bold"))
    lines = [("q", "W_q", q_shape, QCOL, "used once by this pass, then dropped"),
             ("k", "W_k", k_shape, PREFILL, "→ written into the K cache" if t.use_cache else "recomputed, not kept"),
             ("v", "W_v", v_shape, PREFILL, "→ written into the V cache" if t.use_cache else "recomputed, not kept")]
    bus = LABEL_X + 190
    out.append(f'<path d="M {LABEL_X + 170} {y + 56:.1f} L {bus} {y + 56:.1f} M {bus} {y + 18:.1f} L {bus} {y + 94:.1f}" '
               f'stroke="{SOFT}" stroke-width="2" fill="none"/>')
    for i, (name, w, shape, colour, note) in enumerate(lines):
        ly = y + 18 + i * 38
        out.append(arrow(bus, ly, bus + 22, ly, width=2))
        dash = ' stroke-dasharray="5 4"' if name == "q" else ""
        text_w = 116 + len(shape_text(shape) + src) * 8.6 * TEXT
        out.append(f'<g data-role="proj-{name}"><rect x="{bus + 26}" y="{ly - 16:.1f}" width="{text_w:.1f}" height="32" '
                   f'rx="5" fill="{colour}" fill-opacity="0.09" stroke="{colour}" stroke-width="1.8"{dash}/>'
                   + _t(bus + 34, ly + 6, f"{w} → {name}", 16, fill=colour, weight="bold")
                   + _t(bus + 138, ly + 6, shape_text(shape) + src, 14, family=MONO) + '</g>')
        out.append(_t(bus + 36 + text_w, ly + 6, note, 13,
                      fill=RECOMPUTED if "recomputed" in note else (QCOL if name == "q" else SOFT)))
    y += 124
    labels, lh = _position_labels(pieces, t.kv_len, y)
    out.append(labels)
    y += lh + 12
    out.append(_writes(t, "k", y + 2))
    kg, kh = _kv_grid("K", t, lt, prompt_len, y + 4, kv_heads, kv_head, rejected_from)
    out.append(kg)
    y += kh + 16
    vg, vh = _kv_grid("V", t, lt, prompt_len, y + 4, kv_heads, kv_head, rejected_from)
    out.append(_writes(t, "v", y + 2))
    out.append(vg)
    y += vh + 14
    sg, sh = _scores(t, lt, head, kv_head, pieces, y + 4, 120, rejected_from)
    out.append(sg)
    y += sh + 16
    out_shape = tuple(x_shape) if x_shape else None
    nxt = f"layer {layer + 1}" if layer + 1 < len(t.layers) else "the final norm"
    out.append(_t(LABEL_X, y + 16, f"softmax · V → out {shape_text(out_shape)} → {nxt}", 15))
    window = f" (window {lt.window})" if lt.window else ""
    out.append(_t(GRID_X1, y + 16, f"keys read: {lt.kv_len}{window}", 13, "end", SOFT))
    return "".join(out), y + 26


# ---------------------------------------------------------------- the LM head and the loop


def _head(t: StepTrace, y: float, chosen_xy: tuple) -> str:
    out = []
    logits = f"LM head → logits {shape_text(t.logits_shape)}"
    out.append(_t(10, y + 22, logits, 15, weight="bold"))
    chosen_text = show_piece(t.token)
    rule = t.rule.split(":")[0].split(" (")[0]
    rule_w = text_width(f"→ {rule} →", 14)
    chosen_w = min(200.0, mono_width(chosen_text, 17))
    x = 360
    for c in t.top[:5]:
        chosen = c.token_id == t.token_id
        label = f"{show_piece(c.token)} {c.logit:.1f}"
        w = min(170, mono_width(label, 14) + 14)
        if x + w > LOOP_X - rule_w - chosen_w - 30:  # the rule and the chosen token always fit after the chips
            break
        out.append(f'<g data-role="logit" data-chosen="{int(chosen)}"><rect x="{x:.1f}" y="{y + 3:.1f}" width="{w:.1f}" '
                   f'height="30" rx="4" fill="{NEW if chosen else "#eee"}" fill-opacity="{0.25 if chosen else 1}" '
                   f'stroke="{NEW if chosen else "none"}" stroke-width="2"/>'
                   + _t(x + w / 2, y + 24, label, mono_fit(label, 14, w - 10), "middle", family=MONO) + '</g>')
        x += w + 6
    out.append(_t(x + 4, y + 24, f"→ {rule} →", 14, fill=SOFT))
    tx = x + 10 + rule_w
    size = mono_fit(chosen_text, 17, LOOP_X - 16 - tx)  # before the loop's lane, whole: never "<|end"
    out.append('<g data-role="chosen">' + _t(tx, y + 24, chosen_text, size, weight="bold", fill=NEW, family=MONO)
               + '</g>')
    # the loop: the chosen token goes back to the end of the strip, to be fed next step. It runs right, then straight
    # up its own lane (LOOP_X, right of the key columns, their labels and "keys read") into the "next:" chip's bottom
    _, chip_bottom = chosen_xy
    start = min(LOOP_X - 12, tx + mono_width(chosen_text, size) + 6)
    out.append(f'<path data-role="loop" d="M {start:.1f} {y + 18:.1f} L {LOOP_X - 10} {y + 18:.1f} '
               f'Q {LOOP_X} {y + 18:.1f} {LOOP_X} {y + 8:.1f} L {LOOP_X} {chip_bottom + 3:.1f}" fill="none" '
               f'stroke="{NEW}" stroke-width="2.5" stroke-dasharray="7 4" marker-end="url(#arrow-new)"/>')
    return "".join(out)


def caption_lines(t: StepTrace) -> tuple[str, str]:
    """The numbers of this pass: what was computed, then what it cost (estimates labelled)."""
    # one row through each weight matrix is a matrix-vector product; several rows, a matrix-matrix product
    kind = "matrix-vector" if t.q_len == 1 else "matrix-matrix"
    first = [f"this pass: {t.q_len} position{'s' if t.q_len != 1 else ''} computed ({kind})"]
    if t.recomputed:
        first.append(f"positions recomputed that were already known: {t.recomputed}")
    else:
        first.append(f"{t.kv_len} keys read by the newest query")
    second = [f"{human_flops(t.flops_estimate)} (estimate)", f"{human_bytes(t.bytes_estimate)} moved (estimate)",
              f"{t.timing.describe(short=True)} measured"]
    return " · ".join(first), " · ".join(second)


def caption(t: StepTrace) -> str:
    """The numbers of this pass in one line (the stage's text alternative)."""
    return " — ".join(caption_lines(t))


def stage_heading(t: StepTrace) -> str:
    """The stage's own first line, in words: what a phone shows above a picture that scrolls (a page with no
    phone layout of its stage)."""
    return f"{PHASE_NAMES.get(t.phase, t.phase.capitalize())} · step {t.step} · cache {'on' if t.use_cache else 'off'}"


def stage_html(svg: str, alt: str, heading: str | None = None, phone: str | None = None) -> str:
    """The stage as an <img> of the SVG: a picture can run no script and fetch nothing, whatever it shows.

    `phone`: the same pass laid out for a phone (drawing/stage_phone.py), a second <img> that ui/style.py shows
    instead where the screen is a phone's (a <picture>'s data-URI srcset does not survive st.html's sanitizer); it
    fits the screen whole, so nothing scrolls and no first line is repeated.
    `heading`: without a phone layout, the picture's first line again as text, shown on a phone only (ui/style.py),
    where the picture scrolls."""
    if phone is not None:
        return (f'<div class="dl-stage dl-stage-fits" data-testid="dl-stage">'
                f'<img class="dl-stage-wide" alt="{escape(alt)}" src="{data_uri(svg)}"/>'
                f'<img class="dl-stage-phone" alt="{escape(alt)}" src="{data_uri(phone)}"/></div>')
    head = f'<div class="dl-stage-head">{escape(heading)}</div>' if heading else ""
    return (f'{head}<div class="dl-stage" data-testid="dl-stage"><img alt="{escape(alt)}" '
            f'src="{data_uri(svg)}"/></div>')


def stage_svg(t: StepTrace, pieces: list[str], prompt_len: int, layer: int = 0, head: int = 0,
              rejected_from: int | None = None, title: str | None = None) -> str:
    """The whole stage for one traced pass. `pieces`: the text of every position 0..kv_len-1 (at least).

    rejected_from: for a speculative verify pass, the first fed position whose guess was rejected; its
    K/V columns were written by the pass and then cut from the cache (drawn red, the tokens struck out).
    """
    layer = max(0, min(layer, len(t.layers) - 1))
    lt = t.layers[layer]
    q_shape = lt.shapes.get("attn.q")
    heads = q_shape[1] if q_shape else (lt.pattern.shape[0] if lt.pattern is not None else 1)
    head = max(0, min(head, heads - 1))
    y = 6
    header = title or stage_heading(t)
    body = [_t(0, y + 20, header, 18, weight="bold")]
    y += 34
    strip, sh, chosen_xy = _strip(t, pieces, prompt_len, y, rejected_from)
    body.append(strip)
    y += sh + 14
    panel_top = y
    panel, y_end = _panel(t, pieces, prompt_len, layer, head, y, rejected_from)
    body.append(_layers(len(t.layers), layer, panel_top, y_end))
    body.append(panel)
    y = y_end + 12
    body.append(f'<line x1="0" y1="{y:.1f}" x2="{W}" y2="{y:.1f}" stroke="#ddd"/>')
    body.append(_head(t, y + 4, chosen_xy))
    y += 48
    first, second = caption_lines(t)
    body.append(f'<g data-role="caption">{_t(10, y + 20, first, 14, weight="bold")}{_t(10, y + 44, second, 14)}</g>')
    height = y + 56
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height:.0f}" width="100%" '
            f'role="img" aria-label="{escape(caption(t))}" data-role="stage" data-phase="{t.phase}" '
            f'data-step="{t.step}" data-cache="{int(t.use_cache)}" style="max-height:100%">'
            + defs() + "".join(body) + '</svg>')
