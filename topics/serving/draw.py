"""The Serving page's pictures, drawn from a serving run's step records (engine/generate/serving/record.py).

    pool_svg       the KV block pool as a grid: each block coloured by the request that holds it, filled as far
                   as its positions are written, shared blocks (a common prefix) striped and counted, cached ones
                   (no request holds them, their prefix kept: free to evict) grey with a dashed edge, free empty;
                   a key of the four states; every block table below it, block ids in order
    pass_svg       ONE forward pass: the fed tokens of every scheduled request laid end to end, [batch=1, T],
                   each request's part coloured by what it is (prefill chunk, decode, recompute), and the queue
    timeline_svg   x = engine step, one row per request: waiting, prefill chunk, decode, recompute, preempted

Phases keep the app's colours (prefill blue, decode orange, recomputed red); requests get their own hues, away
from those, and are always named too ("r3"), so nothing relies on colour alone. Every element a test may count
carries data-role. Text goes through drawing.svg.text, which escapes it.

Each is drawn for a width: the page's (half of it for the pool and the pass), or a phone's (PHONE, the phone's
stage's width), where the same picture reflows instead of shrinking: fewer columns of blocks, a long block table
in rows, the timeline's steps in bands one under the other, lines wrapped; no text under 11 px on a 390 px screen.
"""

from __future__ import annotations

import functools
import math
import statistics

from drawing.palette import DECODE, MASKED, PREFILL, RECOMPUTED
from drawing.stage_phone import NW, title_lines, wrap
from drawing.svg import FONT, INK, MONO, SOFT, TEXT, W, text_width
from drawing.svg import text as _t
from engine.generate.serving.blocks import BlockState
from engine.generate.serving.record import NOT_ARRIVED, ServingStep
from topics.serving.record import ORDER_SLACK
from topics.serving.slots import sat_out, slot_use

HALF = 640  # viewBox width of a picture drawn in half the page: about one unit per pixel at 1280x720
PHONE = NW  # drawn for a phone: the phone's stage's width (drawing/stage_phone.py), every text 11 px or more there

# one hue per request, chosen away from the phase colours (blue, orange, green, red, grey, purple)
REQUEST_COLOURS = ("#17becf", "#e377c2", "#bcbd22", "#8c564b", "#5254a3", "#e7ba52", "#9edae5", "#ad494a",
                   "#637939", "#ce6dbd", "#843c39", "#7b4173")
PADDING = "#8a8a8a"  # static batching's padding rows: grey, hatched (computed, and thrown away)
PHASE_COLOURS = {"prefill": PREFILL, "decode": DECODE, "recompute": RECOMPUTED, "padding": PADDING}
PHASE_FILLS = {**PHASE_COLOURS, "recompute": "url(#recomputed-s)", "padding": "url(#padding)"}  # what a cell is filled by
PHASE_WORDS = {"prefill": "prefill chunk", "decode": "decode", "recompute": "recompute", "padding": "padding"}


def request_colour(request_id: str) -> str:
    return REQUEST_COLOURS[int(request_id[1:]) % len(REQUEST_COLOURS)]


def _contrast(hex_colour: str) -> float:
    """WCAG's contrast ratio of a colour against white."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(hex_colour[i:i + 2], 16) / 255) for i in (1, 3, 5))
    return 1.05 / (0.2126 * r + 0.7152 * g + 0.0722 * b + 0.05)


def request_ink(request_id: str) -> str:
    """A request's name in its colour, darkened until it reads on white (WCAG's 4.5:1): r6's pale cyan and r5's
    pale yellow names faded on a phone, beside their cells in the full colour."""
    return _ink(request_colour(request_id))


@functools.cache  # once a colour: every picture of every step names its requests
def _ink(colour: str) -> str:
    for k in range(11):
        ink = "#" + "".join(f"{round(int(colour[i:i + 2], 16) * (1 - k / 10)):02x}" for i in (1, 3, 5))
        if _contrast(ink) >= 4.5:
            return ink
    return "#000000"


def _svg(height: float, body: str, title: str, width: int = W) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height:.0f}" font-family="{FONT}">'
            f'<title>{title}</title><defs><pattern id="shared" width="8" height="8" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="8" height="8" fill="#fff" fill-opacity="0"/>'
            f'<line x1="0" y1="0" x2="0" y2="8" stroke="#fff" stroke-width="3" stroke-opacity="0.75"/></pattern>'
            f'<pattern id="recomputed-s" width="6" height="6" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f7c9c9"/>'
            f'<line x1="0" y1="0" x2="0" y2="6" stroke="{RECOMPUTED}" stroke-width="3"/></pattern>'
            f'<pattern id="idle-slot" width="5" height="5" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
            f'<rect width="5" height="5" fill="#fff"/><line x1="0" y1="0" x2="0" y2="5" stroke="{RECOMPUTED}" '
            f'stroke-width="1.6" stroke-opacity="0.7"/></pattern>'
            f'<pattern id="padding" width="5" height="5" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)">'
            f'<rect width="5" height="5" fill="#e6e6e6"/><line x1="0" y1="0" x2="0" y2="5" stroke="{PADDING}" '
            f'stroke-width="2"/></pattern></defs>'
            f'<rect width="{width}" height="{height:.0f}" fill="#fff"/>{body}</svg>')


# ---------------------------------------------------------------- titles, and lines that wrap on a phone


def pool_title(num_blocks: int, page_size: int) -> str:
    return f"KV block pool: {num_blocks} blocks × {page_size} positions"


def pass_title(step: ServingStep) -> str:
    n = len(step.rows)
    return (f"step {step.step}: ONE forward pass, {n} request{'s' if n != 1 else ''}" if n
            else f"step {step.step}: no pass (waiting for arrivals)")


def timeline_title() -> str:
    return "timeline: x = engine step, one row per request"


def _said(x: float, y: float, text: str, size: float, room: float | None, sep: str = " · ",
          **kw) -> tuple[str, float]:
    """`text` from its first baseline at y: one line on a wide picture (room None), on a phone's broken between
    its parts (split at `sep`), else its words, into lines no wider than `room`; (svg, the height its lines add to
    one)."""
    look = (kw.get("weight") == "bold", kw.get("family") == MONO)  # room for the separator a broken line ends on
    lines = [text] if room is None else title_lines(text, size, room - text_width(sep, size, *look), *look, sep)
    step = size * TEXT * 1.25
    more = (len(lines) - 1) * step if len(lines) > 1 else 0  # a whole number where nothing wrapped
    extra = kw.pop("extra", "")  # a role, once: on the first line
    return "".join(_t(x, y + i * step, line, size, extra=extra if i == 0 else "", **kw)
                   for i, line in enumerate(lines)), more


# ---------------------------------------------------------------- the pool and the block tables


def pool_svg(step: ServingStep, num_blocks: int, page_size: int, width: int = HALF) -> str:
    """The block pool after `step`, and every request's block table. `width`: HALF for half a wide page, PHONE for
    a phone's, where the grid has fewer columns, its lines wrap and a long block table takes more than one row."""
    room = None if width >= HALF else width - 8  # a phone's lines wrap
    owners = step.owners()
    held = dict(step.held)
    tables = dict(step.tables)
    fill: dict[int, int] = {}  # block -> positions written in it
    for rid, table in tables.items():
        for i, block in enumerate(table):
            fill[block] = max(fill.get(block, 0), min(page_size, held.get(rid, 0) - i * page_size))
    cols = (12 if num_blocks <= 48 else 16) if room is None else 8
    cw = (width - 8) / cols
    ch = min(40.0, cw * 0.8)
    title, more = _said(4, 20, pool_title(num_blocks, page_size), 15, room, ": ", weight="bold")
    x0, y0, out = 4, 30 + more, [title]
    states = dict(enumerate(step.block_states))  # free · cached · in use · shared (empty: a record without them)
    for b in range(num_blocks):
        x, y = x0 + (b % cols) * cw, y0 + (b // cols) * ch
        who = owners.get(b, ())
        cached = not who and states.get(b) == BlockState.CACHED
        role = "block-shared" if len(who) > 1 else ("block-used" if who else "block-cached" if cached else "block-free")
        out.append(f'<g data-role="{role}" data-block="{b}">')
        if cached:  # no table holds it, its prefix is kept for a later request: free to evict
            out.append(f'<rect x="{x + 2:.1f}" y="{y + 2:.1f}" width="{cw - 4:.1f}" height="{ch - 4:.1f}" rx="4" '
                       f'fill="{CACHED}" stroke="#555" stroke-width="1.6" stroke-dasharray="4 3"/>')
            out.append(_t(x + cw / 2, y + ch / 2 + 5, str(b), 12, "middle", INK, "bold", MONO))
            out.append("</g>")
            continue
        out.append(f'<rect x="{x + 2:.1f}" y="{y + 2:.1f}" width="{cw - 4:.1f}" height="{ch - 4:.1f}" rx="4" '
                   f'fill="#fff" stroke="{"#222" if len(who) > 1 else "#bbb"}" '
                   f'stroke-width="{3 if len(who) > 1 else 1.2}"/>')
        if who:
            share = min(1.0, fill.get(b, 0) / page_size)
            out.append(f'<rect x="{x + 3:.1f}" y="{y + 3:.1f}" width="{(cw - 6) * share:.1f}" height="{ch - 6:.1f}" '
                       f'rx="3" fill="{request_colour(who[0])}" fill-opacity="0.85"/>')
            if len(who) > 1:
                out.append(f'<rect x="{x + 3:.1f}" y="{y + 3:.1f}" width="{cw - 6:.1f}" height="{ch - 6:.1f}" '
                           f'rx="3" fill="url(#shared)"/>')
            label = who[0] if len(who) == 1 else f"×{len(who)}"
            out.append(_t(x + cw / 2, y + ch / 2 + 6, label, 13, "middle", INK, "bold", MONO))
        else:
            out.append(_t(x + cw / 2, y + ch / 2 + 5, str(b), 12, "middle", "#999",
                          family=MONO))
        out.append("</g>")
    y = y0 + -(-num_blocks // cols) * ch + 4
    saved = sum(len(t) for t in tables.values()) - step.blocks_used
    evicted = f" · {step.blocks_evicted} evicted this step" if step.blocks_evicted else ""
    counts, more = _said(x0, y + 14, f"{step.blocks_used} used · {step.blocks_shared} shared"
                         + (f" (saves {saved})" if saved else "") + f" · {step.blocks_cached} cached, free to evict · "
                         f"{step.blocks_free - step.blocks_cached} free{evicted}", 13, room, fill=INK)
    out.append(counts)
    y += 22 + more
    key, more = _pool_key(x0, y, width)
    out.append(key)
    y += 22 + more
    heading, more = _said(x0, y + 14, "block tables: request → its blocks, in order", 13, room, ": ",
                           weight="bold")
    out.append(heading)
    y += 20 + more
    if not tables:
        out.append(_t(x0, y + 16, "no request holds a block", 12, fill=SOFT))
        y += 22
    bw = 32
    per_row = int((width - 60 - 110) // bw)  # a table's blocks a row, with room after them for its positions
    for rid, table in sorted(tables.items(), key=lambda kv: int(kv[0][1:])):
        out.append(f'<g data-role="table" data-request="{rid}">')
        out.append(_t(x0, y + 18, rid, 14, weight="bold", fill=request_ink(rid), family=MONO))
        shown = table[:per_row * (1 if room is None else 3)]  # on a phone, up to three rows of its blocks
        for i, block in enumerate(shown):
            bx, by = x0 + 40 + (i % per_row) * bw, y + (i // per_row) * 26
            shared = len(owners.get(block, ())) > 1
            out.append(f'<rect x="{bx:.1f}" y="{by + 3:.1f}" width="{bw - 3}" height="21" rx="3" '
                       f'fill="{request_colour(owners[block][0])}" fill-opacity="0.35" '
                       f'stroke="{"#222" if shared else "#999"}" stroke-width="{2.5 if shared else 1}"/>')
            out.append(_t(bx + (bw - 3) / 2, by + 18, str(block), 12, "middle", INK,
                          family=MONO))
        last_row = max(len(shown) - 1, 0) // per_row
        y += last_row * 26
        extra = f" (+{len(table) - len(shown)})" if len(table) > len(shown) else ""
        out.append(_t(x0 + 44 + (len(shown) - last_row * per_row) * bw, y + 18, f"{held.get(rid, 0)} pos{extra}", 12,
                      fill=SOFT))
        out.append("</g>")
        y += 26
    return _svg(y + 6, "".join(out), f"block pool after engine step {step.step}", width)


CACHED = "#e3e3e3"  # a cached block: grey, kept but nobody's, with a dashed edge (free to evict)


def _pool_key(x: float, y: float, width: float) -> tuple[str, float]:
    """The four states of a block, once, under the pool: in use, shared, cached (free to evict), free; in rows no
    wider than `width`. (svg, the height its rows add to one)."""
    sw = 'x="{x:.1f}" y="{y:.1f}" width="16" height="12" rx="3"'
    items = [(f'<rect {sw} fill="{REQUEST_COLOURS[0]}" fill-opacity="0.85" stroke="#bbb"/>', "in use (its request's colour)"),
             (f'<rect {sw} fill="{REQUEST_COLOURS[0]}" fill-opacity="0.85" stroke="#222" stroke-width="2"/>'
              f'<rect {sw} fill="url(#shared)"/>', "shared"),
             (f'<rect {sw} fill="{CACHED}" stroke="#555" stroke-dasharray="4 3"/>', "cached, free to evict"),
             (f'<rect {sw} fill="#fff" stroke="#bbb"/>', "free")]
    out, at, top = ['<g data-role="pool-key">'], x, y
    for swatch, name in items:
        if at > x and at + 21 + text_width(name, 12) > width:
            at, y = x, y + 19
        out.append(swatch.format(x=at, y=y) + _t(at + 21, y + 11, name, 12, fill=SOFT))
        at += 36 + len(name) * 7.4  # Source Sans's advance (text_width above is the widest fallback font's)
    return "".join(out) + "</g>", y - top


# ---------------------------------------------------------------- one pass and the queue


def pass_svg(step: ServingStep, d_model: int, width: int = HALF) -> str:
    """The step's one forward pass: every scheduled request's fed tokens end to end, then the queue. `width`: HALF
    for half a wide page, PHONE for a phone's, where its lines wrap (the pass's parts too, past what one row holds)."""
    room = None if width >= HALF else width - 8  # a phone's lines wrap
    x0, x1 = 4, width - 4
    n = len(step.rows)
    title, y = _said(x0, 20, pass_title(step), 15, room, ": ", weight="bold")
    out = [title]
    y += 32
    if step.rows:
        total = sum(r.q_len for r in step.rows)
        minw = 44.0
        per_row = n if room is None else max(1, int((x1 - x0) // minw))  # a phone's row holds this many parts
        free = max(1.0, (x1 - x0) - minw * min(n, per_row))
        x = x0
        for i, r in enumerate(step.rows):
            if i and i % per_row == 0:  # the pass goes on in the next row, as a wrapped line of text does
                x, y = x0, y + 36
            w = minw + free * r.q_len / total
            fill = PHASE_FILLS[r.phase]
            ink = {"recompute": RECOMPUTED, "padding": INK}.get(r.phase, "#fff")
            out.append(f'<g data-role="row-{r.phase}" data-request="{r.id}" data-q-len="{r.q_len}">'
                       f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{w - 2:.1f}" height="30" rx="4" fill="{fill}" '
                       f'stroke="{request_colour(r.id)}" stroke-width="4"/>'
                       + _t(x + w / 2, y + 21, f"{r.id}·{r.q_len}" if w < 70 else f"{r.id} · {r.q_len}", 13,
                            "middle", ink, "bold", MONO) + "</g>")
            x += w
        y += 48
        ms = "" if step.forward_ms is None else f", pass {step.forward_ms:.1f} ms measured"  # the step's whole: TTFT's
        shapes, more = _said(x0, y, f"input_ids [1, {total}] · hidden [1, {total}, {d_model}]{ms}", 13, room,
                             family=MONO)
        out.append(shapes)
        y += 20 + more
        keys, more = _said(x0, y, f"keys read: {step.kv_read}, each request its own (mask)", 12, room, fill=SOFT)
        out.append(keys)
        y += more
        for r in step.rows[:6]:
            y += 20
            what = PHASE_WORDS[r.phase] + (f" {r.chunk}" if r.phase in ("prefill", "recompute") else "")
            made = (f"→ {r.token!r}" if r.token_id is not None else
                    "(done: computed, thrown away)" if r.phase == "padding" else "(prompt goes on)")
            out.append(f'<rect x="{x0}" y="{y - 12}" width="11" height="11" rx="2" fill="{PHASE_COLOURS[r.phase]}"/>')
            said, more = _said(x0 + 16, y, f"{r.id} {what}, q_len {r.q_len}  {made}", 12,
                               None if room is None else room - 16, family=MONO)
            out.append(said)
            y += more
        if n > 6:
            y += 18
            out.append(_t(x0 + 16, y, f"… and {n - 6} more", 12, fill=SOFT))
    events = []
    if step.arrived:
        events.append(("arrived " + " ".join(step.arrived), INK))
    for rid, k in step.prefix_hits:
        events.append((f"{rid} finds {k} positions' blocks cached: not computed", INK))
    if step.preempted:
        events.append(("preempted " + " ".join(step.preempted) + ": blocks freed", RECOMPUTED))
    if step.blocks_evicted:
        events.append((f"evicted {step.blocks_evicted} cached block{'s' if step.blocks_evicted != 1 else ''} "
                       "(least recently used) to make room", INK))
    if step.finished:
        events.append(("finished " + " ".join(step.finished) + ": blocks freed"
                       + (" (full ones stay cached)" if step.blocks_cached else ""), INK))
    for e, colour in events[:4]:
        y += 20
        said, more = _said(x0, y, e, 12, room, fill=colour, weight="bold", extra='data-role="event"')
        out.append(said)
        y += more
    y += 26
    groups = {"waiting": [], "running": [], "preempted": [], "done": []}
    for rid, status in step.statuses:
        if status in groups:
            groups[status].append(rid)
    per_row = int((x1 - x0 - 92) // 40)  # the chips a row holds: a phone's queue takes more than one row
    for name, ids in groups.items():
        out.append(f'<g data-role="queue-{name}">' + _t(x0, y + 2, f"{name}", 12, fill=SOFT))
        for i, rid in enumerate(ids[:12]):
            if i and i % per_row == 0:
                y += 22
            at = x0 + 92 + (i % per_row) * 40
            out.append(f'<rect x="{at}" y="{y - 13}" width="36" height="19" rx="4" '
                       f'fill="{request_colour(rid)}" fill-opacity="{0.3 if name == "done" else 0.85}"/>'
                       + _t(at + 18, y + 1, rid, 12, "middle", INK, "bold", MONO))
        if not ids:
            out.append(_t(x0 + 92, y + 2, "—", 12, fill=SOFT))
        out.append("</g>")
        y += 22
    return _svg(y, "".join(out), f"the forward pass of engine step {step.step}", width)


# ---------------------------------------------------------------- the timeline


CELL = 12  # on a phone, a step's column is at least this wide (10 px): the steps past it go on in another band


def timeline_svg(steps: list[ServingStep], request_ids: list[str], current: int, last: int | None = None,
                 slots: int | None = None, width: int = W, span: int | None = None) -> str:
    """One row per request, one column per engine step (up to `last`): what each request did in each pass. A request
    in the pool but not in a pass "sat out a step" (slots.sat_out: the one definition every count of it reads).
    `slots`: the run's batch slots, drawn under the requests (slots.slot_use): who held each slot at each step, and
    the slots left idle while a request waited (hatched), the waste of a static batch.
    `width`: W for the page's width; PHONE for a phone's, where the steps go on in bands, one under the other, each
    of columns at least CELL wide, and the title, the slots' heading and the key wrap.
    `span`: the engine steps the axis holds, when two runs are drawn to one scale (static against continuous
    batching): a run of fewer steps ends short of the edge, never stretched to look as long as the other."""
    last = max(len(steps) - 1, 0) if last is None else last
    n = last + 1
    room = None if width >= HALF else width - 16  # a phone's lines wrap
    x0, x1 = (68 if slots else 50), width - 10  # room for the slot rows' names
    columns = max(n, span or 0)  # the steps the axis holds
    per = columns if room is None else math.ceil(columns / math.ceil(columns * CELL / (x1 - x0)))  # steps a band
    cw = (x1 - x0) / max(per, 1)
    rh = 17
    title, more = _said(10, 15, timeline_title(), 12, room, ": ", weight="bold")  # the slots have a line of their own
    out = [title]
    y = 24 + more
    rows_by_step = [{r.id: r for r in s.rows} for s in steps]
    sat = {(rid, k) for rid, ks in sat_out(steps[:n]).items() for k in ks}
    use = slot_use(steps[:n], slots) if slots else []
    every = max(1, round(per / 12))
    for k0 in range(0, n, per):
        band, y0 = range(k0, min(n, k0 + per)), y
        for i, rid in enumerate(request_ids):
            y = y0 + i * rh
            out.append(_t(10, y + 13, rid, 11, weight="bold", fill=request_ink(rid), family=MONO))
            for k in band:
                x = x0 + (k - k0) * cw
                row = rows_by_step[k].get(rid)
                status = steps[k].status(rid)
                cell = f'data-request="{rid}" data-step="{k}"'
                box = f'{cell} x="{x + 0.5:.1f}" width="{max(cw - 1, 1):.1f}"'
                if row is not None:
                    fill = PHASE_FILLS[row.phase]
                    h = rh - 12 if row.phase in ("decode", "padding") else rh - 6
                    out.append(f'<rect data-role="cell-{row.phase}" {box} y="{y + (rh - 2 - h) / 2 + 2:.1f}" '
                               f'height="{h}" fill="{fill}"/>')
                elif rid in steps[k].preempted or status == "preempted":
                    out.append(f'<rect data-role="cell-preempted" {box} y="{y + 4}" height="{rh - 8}" fill="#fff" '
                               f'stroke="{RECOMPUTED}" stroke-width="1.5"/>')
                elif status == "waiting":
                    out.append(f'<rect data-role="cell-waiting" {box} y="{y + 7}" height="3" fill="{MASKED}"/>')
                elif (rid, k) in sat:  # in the pool but left out of this pass: it sat out a step
                    out.append(f'<rect data-role="cell-idle" {box} y="{y + 5.5}" height="{rh - 12}" fill="#fff" '
                               f'stroke="{DECODE}" stroke-width="1.5" stroke-dasharray="3 2"/>')
                elif status != NOT_ARRIVED and rid in steps[k].finished:
                    out.append(_t(x + cw / 2, y + 15, "✓", 12, "middle", SOFT))
        y = y0 + len(request_ids) * rh + 4
        if slots:
            if k0 == 0:  # the slots' heading once, over the first band's
                heading, more = _said(x0 if room is None else 6, y + 13, f"{slots} batch slots: the request in each "
                                      "(hatched: padding, or idle while a request waited)", 11, room, weight="bold")
                out.append(heading)
                y += 20 + more
            for j in range(max((len(u.slots) for u in use), default=slots)):
                out.append(_t(6, y + 13, f"slot {j}", 11, weight="bold", fill=INK, family=MONO))
                for k in band:
                    u, x = use[k], x0 + (k - k0) * cw
                    rid = u.slots[j] if j < len(u.slots) else None
                    box = f'data-slot="{j}" data-step="{k}" x="{x + 0.5:.1f}" width="{max(cw - 1, 1):.1f}"'
                    if rid is not None:
                        padding = rid in u.padding  # a finished request's row, computed and thrown away
                        out.append(f'<rect data-role="{"slot-padding" if padding else "slot-held"}" '
                                   f'data-request="{rid}" {box} y="{y + 2}" height="{rh - 4}" '
                                   f'fill="{request_colour(rid)}" fill-opacity="{0.35 if padding else 0.8}"/>')
                        if padding:
                            out.append(f'<rect {box} y="{y + 2}" height="{rh - 4}" fill="url(#padding)" '
                                       f'fill-opacity="0.8"/>')
                    elif u.waiting:  # nobody in it while a request waits in the queue
                        out.append(f'<rect data-role="slot-idle-waiting" {box} y="{y + 2}" height="{rh - 4}" '
                                   f'fill="url(#idle-slot)" stroke="{RECOMPUTED}" stroke-width="0.8"/>')
                y += rh
            y += 4
        if k0 <= current < k0 + per and current <= last:
            cx = x0 + (current - k0) * cw
            out.append(f'<rect data-role="current-step" x="{cx:.1f}" y="{y0 - 4}" width="{max(cw, 2):.1f}" '
                       f'height="{y - y0 + 6}" fill="none" stroke="#111" stroke-width="2"/>')
        for k in step_ticks(band, every):
            out.append(_t(x0 + (k - k0) * cw + cw / 2, y + 13, str(k), 11, "middle", SOFT, family=MONO))
        y += 20 if band.stop == n else 30  # a gap before the next band
    key = [(f'fill="{PREFILL}"', "prefill chunk", None), (f'fill="{DECODE}"', "decode", None),
           ('fill="url(#recomputed-s)"', "recompute", None), (f'fill="{MASKED}"', "waiting", None),
           (f'fill="#fff" stroke="{DECODE}" stroke-dasharray="3 2"', "sat out a step", None),
           (f'fill="#fff" stroke="{RECOMPUTED}"', "preempted (waits to be recomputed)", None)]
    if slots or any(r.phase == "padding" for s in steps[:n] for r in s.rows):
        key += [None, ('fill="url(#padding)"', "padding: a finished request's row, computed and thrown away", 470),
                (f'fill="url(#idle-slot)" stroke="{RECOMPUTED}" stroke-width="0.8"', "slot idle while a request waits",
                 None)]
    said, y = _key(key, x0, y, width)
    out.append(said)
    return _svg(y + 18, "".join(out), "timeline of the serving run", width)


def step_ticks(band: range, every: int) -> list[int]:
    """The engine steps a timeline band labels: every `every`-th from its first, and its last always (a run of 36
    steps ended at a label of 33); the last takes the place of a label half the spacing from it or closer ('16 17'
    crowded a phone's band, the current step's box over both)."""
    ticks = list(range(band.start, band.stop, every))
    last = band.stop - 1
    if ticks and ticks[-1] != last:
        if last - ticks[-1] <= every / 2 and len(ticks) > 1:
            ticks.pop()
        ticks.append(last)
    return ticks


def _key(items: list, x0: float, y: float, width: float) -> tuple[str, float]:
    """A key of swatches and their names, left to right from (x0, y), a new row where the next would pass `width`
    (a name too long for a row of its own wrapped). items: (the swatch's attributes, its name, how far the next
    starts: None for after its name), or None to start a row. (svg, the last row's y)."""
    out, x = [], x0
    for item in items:
        if item is None:
            x, y = x0, y + 18
            continue
        fill, name, advance = item
        if x > x0 and x + 16 + text_width(name, 11) > width:
            x, y = x0, y + 18
        lines = wrap(name, 11, width - x - 16)
        out.append(f'<rect x="{x}" y="{y}" width="12" height="11" {fill}/>'
                   + "".join(_t(x + 16, y + 10 + i * 15, line, 11) for i, line in enumerate(lines)))
        x += advance or 24 + len(name) * 8.2
        if len(lines) > 1:  # the next item starts a row under its last line
            x, y = width, y + 15 * (len(lines) - 1)
    return "".join(out), y


# ---------------------------------------------------------------- tables and the batch chart


NOT_YET = ("first token (step)", "TTFT (steps)", "TTFT ms", "TPOT ms")  # latency_frame's columns that may say "–"


def arrivals_frame(requests, count_tokens):
    """Before the first engine step: who will arrive when, with what (the scenario's requests, in order), so a class
    sees the queue it is about to serve. count_tokens(prompt) -> the prompt's tokens as the engine will feed them."""
    import pandas as pd

    return pd.DataFrame([{"request": f"r{i}", "arrives at step": r.arrive, "prompt tokens": count_tokens(r.prompt),
                          "max new tokens": r.max_new_tokens, "prompt": r.prompt} for i, r in enumerate(requests)])


def latency_frame(run):
    """Per request: arrival, first token, TTFT and TPOT (steps and measured ms), tokens, preemptions, prefix hits."""
    import pandas as pd

    rows = []
    for r in run.requests:
        lat = run.latency(r)
        rows.append({"request": r.id, "arrives": r.arrive,  # the latencies early: on a phone the columns past
                     "TTFT (steps)": lat.ttft_steps,  # its width scroll out of view
                     "TTFT ms": None if lat.ttft_ms is None else round(lat.ttft_ms, 1),
                     "TPOT ms": None if lat.tpot_ms is None else round(lat.tpot_ms, 2),
                     "first token (step)": r.first_token_step, "prompt tokens": r.prompt_len,
                     "new tokens": len(r.generated_ids), "preempted": r.preemptions,
                     "prefix hits": r.prefix_hit_tokens, "status": r.status})
    return pd.DataFrame(rows, dtype=object).fillna("–")  # a number not there yet said as "–", never "None"


def memory_frame(mem):
    """Per allocator: the most KV memory it held at any step (in binary units, then exact bytes) and the share of
    what it held that held no token, averaged over the run's steps (topics.serving.record.Memory)."""
    import pandas as pd

    from physics.units import human_bytes

    names = {"paged": "paged blocks (this run)", "reserve_max_length": "reserve the max length per request",
             "static_padding": "one static padded batch"}
    rows = []
    for k, name in names.items():
        held = getattr(mem, k)
        rows.append({"allocator": name, "peak KV held": f"{human_bytes(held.peak_bytes)} ({held.peak_bytes:,} B)",
                     "wasted (held, no token), averaged": f"{held.wasted:.0%}", "source": held.source})
    return pd.DataFrame(rows)


def sharing_sentence(mem) -> str:
    """What prefix sharing did over the same steps the table averages (topics.serving.measure.memory): the prompt
    positions it kept from being computed (the status line's "skipped by sharing", the same count), and the positions
    the requests read per position the paged pool held (memory: only while two requests hold a block at once)."""
    sh = mem.sharing
    if not sh.steps:
        return ""
    tokens = f"{sh.skipped:,} position{'s' if sh.skipped != 1 else ''}"  # a prompt's, or a preempted request's own
    if sh.saved > 0:
        memory = (f"and the requests read {sh.served:,} positions' keys and values over the run's {sh.steps} steps, "
                  f"from {sh.stored:,} stored (each once) in {sh.held:,} positions of whole blocks, so "
                  f"{sh.served_per_held:.2f} positions served per position held: about {sh.saved / sh.steps:,.0f} "
                  "positions per step not stored twice.")
    else:
        memory = ("but no block was held by two requests at the same step, so it stored nothing once for two: "
                  f"{sh.served:,} positions served from {sh.held:,} held in whole blocks, "
                  f"{sh.served_per_held:.2f} per position held.")
    if sh.skipped:
        return (f"Prefix sharing: {tokens} were not computed when their request was admitted (their blocks were "
                "found held by another request, or still cached after a request finished or was preempted), " + memory)
    if sh.saved > 0:
        return "Prefix sharing: no position was skipped, " + memory
    return ("Prefix sharing found nothing to share here: no position was skipped and no block was held by two "
            "requests at once.")


def chunking_frame(result):
    """The chunked-prefill comparison, one row per way, read off the same two runs whose timelines are drawn: the
    steps a request in the pool sat out are the timeline's dashed cells (topics.serving.slots.sat_out)."""
    import pandas as pd

    def row(way: str) -> dict:
        v = getattr(result, way).stall
        return {"chunked prefill": way, "steps sat out": v.skipped_steps,
                "which (who sat out)": "; ".join(f"{k} ({_requests(v.who(k))})" for k in v.steps) or "none",
                "longest wait between two tokens, while the long prompt was prefilled": f"{v.longest_gap_ms:.1f} ms",
                "long prompt's prefill passes": v.prefill_passes,
                "long prompt's first token": f"in step {v.long_ttft_steps} counting its arrival's, "
                                             f"{v.long_ttft_ms:.1f} ms"}

    return pd.DataFrame([row("on"), row("off")])


def _nth(n: int | None) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 21st: a step counted with its first (the table's TTFT steps count both ends)."""
    if n is None:
        return "(none)"
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _requests(ids) -> str:
    ids = sorted(ids, key=lambda r: int(r[1:]))
    return ids[0] if len(ids) == 1 else (f"{ids[0]}–{ids[-1]}" if len(ids) > 2 and
                                         int(ids[-1][1:]) - int(ids[0][1:]) == len(ids) - 1 else
                                         ", ".join(ids[:-1]) + " and " + ids[-1])


def _stall_words(v) -> str:
    """Each step the requests sat out, who, and what that step's one pass held instead (from the same records)."""
    parts = []
    for k in v.steps:
        rows = v.filled_by.get(k, ())
        held = ", ".join(f"{rid}'s {q}-token prompt, whole" if q == v.prompt_tokens.get(rid) else f"{q} tokens of {rid}"
                         for rid, q in rows) or "nothing"
        parts.append(f"step {k} ({_requests(v.who(k))}), its pass holding {held}")
    return "; ".join(parts)


def chunking_sentence(result) -> str:
    """What the two timelines show, in the table's own numbers (never more than they show)."""
    on, off = result.on.stall, result.off.stall
    long = f"{off.long_id}'s {off.long_prompt_tokens}-token prompt"
    n = off.skipped_steps
    if n:
        said = (f"With chunked prefill off, requests in the pool sat out {n} step{'s' if n != 1 else ''} (dashed on "
                f"its timeline): {_stall_words(off)}. While {long} was prefilled, the longest wait between two "
                f"tokens of another request was {off.longest_gap_ms:.1f} ms.")
    else:
        said = f"With chunked prefill off, no request in the pool sat out a step while {long} was prefilled."
    m = on.skipped_steps
    said += (f" With it on, they sat out {m or 'no'} step{'s' if m != 1 else ''}"
             + (f" ({_stall_words(on)})" if m else "")
             + f" (longest wait {on.longest_gap_ms:.1f} ms), and {long} took {on.prefill_passes} passes: its first "
             f"token came in the {_nth(on.long_ttft_steps)} step counting the one it arrived in, instead of the "
             f"{_nth(off.long_ttft_steps)}.")
    if on.longest_gap_ms >= off.longest_gap_ms and n > m:
        said += " Measured in ms the chunked run waited as long or longer" + _long_passes(result) + "."
    return said + f" Same tokens either way: {'yes' if result.same_tokens else 'no'}."


def _long_passes(result) -> str:
    """Why ms need not follow the steps sat out, in the runs' own pass times: the long prompt's passes, whole and in
    pieces."""
    def passes(way) -> list:
        return [s for s in way.steps if s.forward_ms and any(r.id == way.stall.long_id and r.phase == "prefill"
                                                             for r in s.rows)]

    whole, pieces = passes(result.off), passes(result.on)
    if not whole or not pieces:
        return ""
    big = max(whole, key=lambda s: s.tokens)
    piece_ms = statistics.median(s.forward_ms for s in pieces)
    said = (f": the pass with the whole prompt took {big.forward_ms:.1f} ms ({big.tokens} tokens), a pass with a "
            f"piece of it {piece_ms:.1f} ms (median of {len(pieces)})")
    if big.forward_ms < 2 * piece_ms:
        said += (". On this small model a pass costs about the same whatever its tokens, so cutting the prompt "
                 "adds passes without shortening one; the steps sat out are the number that carries to a model "
                 "whose pass time grows with its tokens")
    return said


POLICY_WORDS = {"newest": "newest (vLLM's: the last admitted goes)", "most_blocks": "most blocks (the biggest holder goes)"}


def policy_frame(result):
    """The preemption policies side by side (topics.serving.measure.policy_comparison), one row per policy."""
    import pandas as pd

    rows = []
    for v in result:
        same = v.same_as_alone
        rows.append({"policy": POLICY_WORDS.get(v.policy, v.policy), "engine steps": v.steps,
                     "preemptions": v.preemptions,
                     "who, at which step": ", ".join(f"{rid} at {step}" for step, rid in v.preempted) or "nobody",
                     "positions computed again": v.recomputed,
                     "same tokens as alone": f"{'yes' if all(same.values()) else 'NO'} ({sum(same.values())} of "
                                             f"{len(same)})"})
    return pd.DataFrame(rows)


def policy_sentence(result) -> str:
    """What the two policies did differently, in the table's numbers."""
    va, vb = result[:2]
    a, b = (v.policy.replace("_", " ") for v in (va, vb))  # as the table and the knob name them: 'most blocks'
    exact = all(all(v.same_as_alone.values()) for v in result)
    said = (f"Policy '{a}' preempted {va.preemptions} time{'s' if va.preemptions != 1 else ''} and computed "
            f"{va.recomputed} positions again, finishing in {va.steps} engine steps; '{b}' preempted "
            f"{vb.preemptions} time{'s' if vb.preemptions != 1 else ''}, computed {vb.recomputed} again, "
            f"{vb.steps} steps.")
    if (va.preemptions, va.recomputed, va.steps) == (vb.preemptions, vb.recomputed, vb.steps) and \
            va.preempted != vb.preempted:
        said += " The counts are the same here; the policies differ in who went when (the table's 'who' column)."
    return said + (" Either way every request's tokens are exactly the ones it gets alone: a policy changes who "
                   "waits and what is computed twice, never what anyone is answered." if exact else
                   " Some request's tokens differ from its tokens alone: that is a bug, not a policy.")


def roomy_sentence(check) -> str:
    """topics.serving.measure.roomy_check in one line, ending on the same check the chunking comparison shows."""
    who = _requests(check.preempted) if check.preempted else "no request"
    cached = [rid for rid in check.preempted if rid not in check.recomputed]  # back on blocks still cached
    said = f"{who} {'was' if len(check.preempted) <= 1 else 'were'} preempted" + (
        " and recomputed" if not cached else
        f" ({_requests(check.recomputed) if check.recomputed else 'none'} recomputed; {_requests(cached)} found "
        f"{'its' if len(cached) == 1 else 'their'} positions' blocks still cached, not computed again)")
    return (f"{said} in this pool of {check.blocks} blocks; the same requests in a pool of {check.roomy_blocks} "
            f"blocks, where nobody is preempted: same tokens either way: **{'yes' if check.same_tokens else 'no'}**.")


def batching_frame(q):
    """The queue served both ways (topics.serving.measure.batching_comparison), one row per way."""
    import pandas as pd

    rows = []
    for way in (q.continuous, q.static):
        rows.append({"batching": way.batching, "tokens/s (median, measured)": f"{way.tokens_per_s:,.0f}",
                     "engine steps": way.engine_steps, "tokens": way.tokens,
                     "slot-steps wasted while a request waited": way.idle_slot_steps,
                     "each round (ms)": ", ".join(f"{x:,.0f}" for x in way.ms)})
    return pd.DataFrame(rows)


def batching_sentence(q) -> str:
    """The queue comparison in the table's own numbers: which way was faster, and what the timelines show of why."""
    c, s = q.continuous, q.static
    said = (f"{q.requests} requests of {min(q.lengths)} to {max(q.lengths)} tokens for {q.slots} batch slots, "
            f"arriving over steps {min(q.arrivals)} to {max(q.arrivals)}: continuous batching made {c.tokens_per_s:,.0f} "
            f"tokens/s, static batching {s.tokens_per_s:,.0f} ({_faster(c.tokens_per_s, s.tokens_per_s, 'continuous', 'static')}; "
            f"{'median of ' + str(q.rounds) + ' alternated rounds' if q.rounds > 1 else 'one round'} after a warm-up). "
            f"Static batching took {s.engine_steps} engine steps to continuous batching's {c.engine_steps}: each batch "
            f"kept its finished members' rows as padding until its longest member was done, {s.idle_slot_steps} "
            f"slot-steps computed for nothing (or left empty) while a request waited (hatched on its timeline), "
            f"against {c.idle_slot_steps} for continuous batching, which gave each freed slot to the queue's front the "
            "next pass.")
    if c.tokens == s.tokens and c.passes and s.passes:  # the rate's ratio taken apart: how many passes, how long each
        step = {w.batching: statistics.median(w.ms) / w.passes for w in (c, s)}
        said += (f" The same {c.tokens} tokens, so the ratio of the rates is that of the times: ×{s.passes / c.passes:.2f} "
                 f"the passes ({s.passes} against {c.passes}) times ×{step['static'] / step['continuous']:.2f} the "
                 f"time a pass ({step['static']:.1f} ms against {step['continuous']:.1f}: the median round's time over "
                 "its passes).")
    wide = [w for w in (c, s) if len(w.ms) > 1 and max(w.ms) > BUSY_RATIO * min(w.ms)]
    if wide:
        said += (" The server was busy while these ran: " + " and ".join(
            f"{w.batching} batching's rounds ranged {min(w.ms):,.0f}–{max(w.ms):,.0f} ms" for w in wide)
            + " for the same work, so the ratio moves with it; `python -m engine serve --scenario queue "
            "--compare-batching` takes the median of more rounds.")
    if c.engine_steps < s.engine_steps and c.tokens_per_s < s.tokens_per_s:
        said += (" Yet continuous batching measured slower here, in fewer steps: the server was busy while these ran; "
                 "run it again, or `python -m engine serve --scenario queue --compare-batching` for more rounds.")
    return said + f" Same tokens either way: {'yes' if q.same_tokens else 'no'}."


WAYS = {"continuous": "continuous<br>batching<br>(this engine)", "static_batch": "static batch<br>(padded)",
        "one_at_a_time": "one request<br>at a time", "generate_batch": "transformers<br>generate_batch"}
WORKLOADS = (("same length, all at once", "#9e9e9e"), ("mixed lengths", "#37474f"))  # neutral: not a phase colour


def throughput_figure(same, mixed=None, scale: float = 1.0):
    """Tokens/s of the same requests served each way (topics.serving.record.Throughput): every request asking for one
    length (grey), and the same prompts asking for different lengths (dark); each bar says its measured tokens/s."""
    import plotly.graph_objects as go

    from drawing.palette import layout

    fig = go.Figure()
    for (name, colour), res in zip(WORKLOADS, (same, mixed)):
        if res is None:
            continue
        ways = [k for k in WAYS if res.tokens_per_s(k)]
        fig.add_trace(go.Bar(y=[WAYS[k] for k in ways], x=[res.tokens_per_s(k) for k in ways], name=name,
                             orientation="h", marker_color=colour, text=[f"{res.tokens_per_s(k):,.0f}" for k in ways],
                             textposition="outside", cliponaxis=False,
                             hovertemplate="%{y}: %{x:,.0f} tokens/s<extra>" + name + "</extra>"))
    # the ways down the side, each named in full on its own lines: along the bottom, four names ran into each
    # other on a phone; the first way on top, each way's two workloads in the legend's order
    fig.update_layout(barmode="group", legend=dict(traceorder="normal"))
    fig.update_yaxes(autorange="reversed")
    top = max((x for t in fig.data for x in t.x), default=1)
    fig.update_xaxes(title="tokens/s (measured)", range=[0, top * 1.2])  # room for the longest bar's figure
    return layout(fig, "Tokens per second, four ways", height=400, scale=scale)  # whole on a phone too


def _faster(a: float, b: float, a_name: str, b_name: str, rounds: tuple[float, ...] | None = None) -> str:
    """'A ×1.21 faster' from two measured rates, whichever way it came out. With `rounds` (a's rate over b's in
    each timed round, the same rounds): one round is said to be one, and rounds that fall on both sides of ×1 are
    no clear difference, with their range."""
    if round(a / b, 2) == 1.0:
        return f"{a_name} and {b_name} at the same rate (×1.00)"
    said = f"{a_name} ×{a / b:.2f} faster" if a >= b else f"{b_name} ×{b / a:.2f} faster"
    if rounds is None:
        return said
    if len(rounds) < 2:
        return said + ", in one round: too few to tell from the server's noise"
    spread = f"×{min(rounds):.2f} to ×{max(rounds):.2f}"
    if not clear(rounds):  # the rounds fall on both sides of ×1
        return f"no clear difference: ×{a / b:.2f} {a_name} over {b_name} by medians, but the rounds ran {spread}"
    return said + f" in every round ({spread})"


def clear(rounds: tuple[float, ...]) -> bool:
    """Two or more rounds, all on one side of ×1: a difference the rounds agree on."""
    return len(rounds) >= 2 and not min(rounds) <= 1 <= max(rounds)


def _passes(res) -> str:
    c, s = res.passes.get("continuous"), res.passes.get("static_batch")
    return f"both took {c} passes" if c == s else f"continuous batching took {c} passes, the static batch {s}"


def throughput_sentence(same, mixed=None) -> str:
    """What the throughput chart shows, from its own numbers, and no more: which way was faster by how much, and what
    the workload lets continuous batching do (no queue: nothing to refill)."""
    c, s = same.continuous_tokens_per_s, same.static_batch_tokens_per_s
    lengths = same.lengths
    out = [f"Same length, all at once ({same.requests} requests × {lengths[0]} tokens): continuous batching made "
           f"{c:,.0f} tokens/s, the static batch {s:,.0f} "
           f"({_faster(c, s, 'continuous', 'static', same.per_round('continuous', 'static_batch'))}). Every request is "
           f"in the first pass and all finish together, so no slot ever frees for continuous batching to refill and "
           f"{_passes(same)}: the gap is what a pass costs each way here (one padded tensor, against a paged pass "
           "with its block tables), not scheduling."]
    if mixed is not None:
        mc, ms = mixed.continuous_tokens_per_s, mixed.static_batch_tokens_per_s
        rounds = mixed.per_round("continuous", "static_batch")  # continuous's rate over static's, round by round
        asked = mixed.lengths
        padded = len(asked) * max(asked)
        # the same total of tokens either way: a static batch of mixed lengths does more padded work than one of equal
        # lengths, and one request at a time the same work, so either coming out far faster is the server's noise
        quick = [(ms, s, "the static batch")]
        flipped = [who for m_, s_, who in quick if m_ and s_ and m_ > BUSY_RATIO * s_]
        out.append(f"Mixed lengths, all at once ({min(asked)} to {max(asked)} tokens, {sum(asked)} in all): the static "
                   f"batch runs every row to the longest, {padded} token slots for {sum(asked)} tokens "
                   f"({1 - sum(asked) / padded:.0%} wasted); continuous batching drops a finished request from the "
                   f"next pass, but with every request already in, nobody waits for the freed slot, and "
                   f"{_passes(mixed)}, as many as the longest request makes. Measured: {mc:,.0f} tokens/s against "
                   f"{ms:,.0f} ({_faster(mc, ms, 'continuous', 'static', rounds)})"
                   + (": all that dropping finished rows from a pass buys here." if clear(rounds) and mc > ms else ".")
                   + " Continuous batching wins where a queue waits for batch slots (scenario 6).")
        if flipped:
            out.append(f"The server was busy while these ran: {' and '.join(flipped)} measured more than ×{BUSY_RATIO:g} "
                       "faster on the mixed lengths though that is as much work or more, so single rounds here are "
                       "noise; `python -m engine bench` takes medians of several.")
        out.append(one_at_a_time_words(same, mixed))
        if not mixed.generate_batch_tokens_per_s:
            out.append("The mixed lengths have no bar for transformers' generate_batch: it serves one length for every "
                       "request.")
    return " ".join(out)


def one_at_a_time_words(same, mixed) -> str:
    """Why one request at a time measures (about) the same for both workloads: it is the same work."""
    a, b = same.one_at_a_time_tokens_per_s, mixed.one_at_a_time_tokens_per_s
    said = ("One request at a time does the same work for both workloads (one pass per token, about the same "
            f"tokens in all), so its two bars should match: {a:,.0f} and {b:,.0f} tokens/s")
    ratio = max(a, b) / min(a, b) if a and b else 1.0
    if round(ratio, 2) <= 1.01:
        return said + "."
    if ratio > BUSY_RATIO:
        return said + f", ×{ratio:.1f} apart: the server was busy, and that gap is its noise, not the workload's."
    # the gap, whatever its size: "should match" beside bars 22% apart said more than the bars showed
    return said + (f", ×{ratio:.2f} apart: the same work, so a gap this size is this server's noise between rounds, "
                   "and a gap between two other bars no larger than it shows nothing about the way of batching.")


BUSY_RATIO = 1.3  # one way measured this much faster on work that is no smaller: the server's noise, said


def batch_time_figure(rows, scale: float = 1.0):
    """The decode pass's measured time against how many sequences share it (BatchPass records), and per sequence."""
    import plotly.graph_objects as go

    from drawing.palette import layout

    xs = [r.batch for r in rows]
    fig = go.Figure([
        go.Scatter(x=xs, y=[r.decode_ms for r in rows], name="one decode pass (median, measured)",
                   mode="lines+markers", line=dict(color=DECODE, width=4), marker=dict(size=9),
                   error_y=dict(type="data", symmetric=False, array=[r.spread[1] - r.decode_ms for r in rows],
                                arrayminus=[r.decode_ms - r.spread[0] for r in rows], color=DECODE, thickness=1.5)),
        go.Scatter(x=xs, y=[r.per_sequence_ms for r in rows], name="per sequence", mode="lines+markers",
                   line=dict(color=DECODE, width=2, dash="dot"), marker=dict(size=7)),
    ])
    fig.update_xaxes(title="sequences sharing the pass (B)", type="log", tickvals=xs, ticktext=[str(x) for x in xs])
    fig.update_yaxes(title="ms (measured; bars: fastest–slowest)", rangemode="tozero")
    return layout(fig, "One decode pass shared by B sequences", height=380, scale=scale)  # beside the batch roofline


def batch_time_caption(sweep) -> str:
    """The sweep in one line, from its own rows; what it says of the server when its order contradicted physics."""
    rows = sweep.rows
    top, first = rows[-1], rows[0]
    retimed = [r.batch for r in rows if r.timed > 1]
    said = (f"{top.batch} sequences in one decode pass took ×{top.over_batch_1:.1f} the time of one "
            f"({top.decode_ms:.1f} ms against {first.decode_ms:.1f} ms): {top.per_sequence_ms:.2f} ms per sequence. "
            f"Medians of 8 passes, measured here; {sweep.warmup_ms:.0f} ms of warm-up passes before B = {first.batch} "
            "left out.")
    if retimed:
        said += (f" B = {', '.join(map(str, retimed))} {'was' if len(retimed) == 1 else 'were'} timed again: a bigger "
                 "batch had come out faster than a smaller one, which more rows of the same work cannot do.")
    dips = [(a, b) for a, b in zip(rows, rows[1:]) if b.decode_ms < a.decode_ms]  # drawn going down, so said
    if dips and not sweep.note:
        said += " " + "; ".join(f"B = {b.batch} timed {1 - b.decode_ms / a.decode_ms:.0%} below B = {a.batch}"
                                for a, b in dips)
        said += (f": within ×{ORDER_SLACK:g}, where the pass costs about the same either way, so the order of two "
                 "such points is noise, not the batch.")
    return said  # a note (sweep.note) is the page's warning, beside this


# ---------------------------------------------------------------- batch size on the roofline


def _flops(x: float) -> str:
    """FLOP/s in a projector's words: '3.2 GFLOP/s', '989 TFLOP/s'."""
    for unit, div in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if x >= div:
            return f"{x / div:.3g} {unit}FLOP/s"
    return f"{x:.3g} FLOP/s"


def batch_roofline_figure(br, scale: float = 1.0):
    """topics.serving.measure.batch_roofline drawn: this device's roof with the measured passes at each batch size
    (filled), and a GPU's roof with its PREDICTED passes (open, on a dashed estimate roof) for the same model and a
    published 8B one. Each point is named by its B; both ridges drawn where they are."""
    import math

    import plotly.graph_objects as go

    from drawing.palette import ESTIMATE, layout, legend_under_title, rate_ticks

    here, gpu, rows = br.here, br.gpu, br.measured
    gpu_name = gpu.name.split(" (")[0]
    xs = [10 ** (i / 20) for i in range(-40, 81)]  # 0.01 .. 1e4 FLOP/byte
    rate = here.bandwidth_for(rows[0].bytes)  # these passes' bytes: the cache's roof where they fit it
    fig = go.Figure([
        go.Scatter(x=xs, y=[min(here.peak_flops, x * here.dram_bandwidth) for x in xs], mode="lines",
                   showlegend=False, line=dict(color="#333", width=3), hoverinfo="skip",
                   name="this device's roof (measured)"),
        *([go.Scatter(x=xs, y=[min(here.peak_flops, x * rate) for x in xs], mode="lines", showlegend=False,
                      line=dict(color="#333", width=2, dash="dash"), hoverinfo="skip",
                      name="the cache's roof (these passes fit it)")] if here.in_cache(rows[0].bytes) else []),
        go.Scatter(x=xs, y=[min(gpu.peak_flops, x * gpu.bandwidth) for x in xs], mode="lines", showlegend=False,
                   line=dict(color=ESTIMATE, width=3, dash="dash"), hoverinfo="skip",
                   name=f"{gpu_name}'s roof (datasheet)"),
    ])

    def every_other(points) -> list[str]:  # B = 1, 4, 16, ...: a name on every point would overlap at the top
        return [f"B={p.batch}" if i % 2 == 0 else "" for i, p in enumerate(points)]

    short = gpu_name.removeprefix("NVIDIA ").split(" ")[0]  # 'H100': the legend fits two rows of half a screen
    series = [(rows, "achieved", f"measured here ({here.dtype})", dict(color=DECODE, size=11), "lines+markers+text"),
              (br.predicted, "attainable", f"{br.model}, {short} {gpu.dtype} predicted",
               dict(color=DECODE, size=10, symbol="circle-open", line=dict(width=2.5)), "lines+markers"),
              (br.predicted_real, "attainable", f"{br.real}, {short} {gpu.dtype} predicted",
               dict(color=ESTIMATE, size=10, symbol="diamond-open", line=dict(width=2.5)), "lines+markers+text")]
    for points, y, name, marker, mode in series:
        fig.add_trace(go.Scatter(
            x=[p.intensity for p in points], y=[getattr(p, y) for p in points], name=name, mode=mode, marker=marker,
            cliponaxis=False,  # the top point's name whole, above the plot's edge if it must
            line=dict(color=marker["color"], width=2, dash="solid" if y == "achieved" else "dot"),
            # the measured points' names under them: above, the roofs' lines struck them through
            text=every_other(points), textposition="bottom right" if y == "achieved" else "top left",
            textfont=dict(size=11 * scale, color=marker["color"]),
            customdata=[p.batch for p in points],
            hovertemplate="B = %{customdata}: %{x:.1f} FLOP/byte, %{y:.3s}FLOP/s<extra>" + name + "</extra>"))
    ys = [y for tr in fig.data for y in tr.y]
    # the y axis's range, fixed, for the ridges' lines below to stand on: down to a half decade (a tick under the
    # lowest roof), up with room for the top point's name above it
    low, high = math.floor(2 * math.log10(min(ys))) / 2 - 0.05, math.log10(max(ys)) + 0.4
    for ridge, peak, colour, words, up in (
            (br.ridge_here, here.peak_flops, "#333", f"ridge here {br.ridge_here:.1f}", 0),
            (gpu.ridge, gpu.peak_flops, ESTIMATE, f"{short} ridge {gpu.ridge:.0f}", 16 * scale)):
        # from the axis up to its own roof's corner, no higher: the other roof's points and names stay uncrossed
        fig.add_shape(type="line", x0=ridge, x1=ridge, y0=10**low, y1=peak, line=dict(dash="dot", color=colour))
        fig.add_annotation(x=math.log10(ridge), y=0.0, yref="paper", xanchor="right", yanchor="bottom", yshift=up,
                           showarrow=False, text=words, font=dict(size=11 * scale, color=colour))
        # a line each: side by side, the two ridges' words would cross on a narrow plot (half a projector, a phone)
    fig.update_xaxes(type="log", dtick=1, title="FLOP per byte moved (estimate)")
    vals, texts = rate_ticks(1e3, 1e17)  # '1000 T', not plotly's '10¹⁵' beside '100T'
    fig.update_yaxes(type="log", tickvals=vals, ticktext=texts, range=[low, high],
                     title="FLOP/s (estimate ÷ measured here; predicted there)")
    fig = layout(fig, "Batch on the roofline", height=380, scale=scale)  # whole on a phone; the legend names the
    # dtypes and the GPU
    fig.update_layout(legend=dict(font=dict(size=11 * scale)), margin=dict(t=int(112 * scale)))  # two legend rows
    return legend_under_title(fig, scale)


def _cache_ridge_words(rows, here) -> str:
    """Where the measured passes fit the cache (the dashed roof): where that roof meets the matmul peak, and the
    batches past it, so the words agree with the dashed roof the points are drawn under."""
    from physics.roofline import ridge_for

    if not here.in_cache(rows[0].bytes):
        return ""
    past = [p.batch for p in rows if p.intensity >= ridge_for(here, p.bytes)]  # each against the roof its bytes get
    return (f" These passes' bytes fit the cache, whose faster roof (dashed) meets the matmul peak at "
            f"{ridge_for(here, rows[0].bytes):.1f} FLOP/byte: "
            + (f"from B = {past[0]} they are right of that ridge." if past else "none of them reaches that ridge either."))


def batch_roofline_sentence(br) -> str:
    """What the batch roofline's filled points show, in their own numbers: how far the measured passes walk toward
    this device's ridge and what the pass's rate did meanwhile. The open points' story is batch_roofline_gpu_words,
    folded under it: one short paragraph beside the chart, the rest a click away."""
    rows, here = br.measured, br.here
    first, last = rows[0], rows[-1]
    side = ("still left of" if last.intensity < br.ridge_here else "past")
    said = (f"Each filled point is one decode pass of B sequences at ~{br.context} positions, measured here: the "
            f"weights are read once for all B, so its FLOPs per byte grow with B, from {first.intensity:.1f} at "
            f"B = {first.batch} to {last.intensity:.1f} at B = {last.batch} ({here.dtype}, estimates), "
            f"{side} this device's ridge of {br.ridge_here:.1f}; the pass went from {_flops(first.achieved)} to "
            f"{_flops(last.achieved)} (×{last.achieved / first.achieved:.1f} for ×{last.batch // first.batch} "
            "the work).")
    said += _cache_ridge_words(rows, here)
    here_sat = br.saturates_here
    return said + (f" By the estimates this device's ridge is reached at B ≈ {here_sat}." if here_sat else
                   " By the estimates no batch reaches this device's ridge at this context.")


def batch_roofline_gpu_title(br) -> str:
    """The fold's title: the question its paragraph answers."""
    return (f"On an {br.gpu.name.split(' (')[0]} (open points, estimates): the batch where the weights stop setting "
            "the step")


def batch_roofline_gpu_words(br) -> str:
    """The open points: at which batch a GPU's predicted passes reach its ridge (for this model and for a published
    one), and the sooner batch where the step stops being the weights' read once the attention's own kernels count."""
    gpu = br.gpu
    gpu_name = gpu.name.split(" (")[0]
    model = (f"{br.model} reaches its ridge ({gpu.ridge:.0f} FLOP/byte) at B ≈ {br.saturates_gpu}"
             if br.saturates_gpu else
             f"{br.model} never reaches its ridge ({gpu.ridge:.0f} FLOP/byte) at this context: its weights are "
             "small beside each request's K/V reads, so each request adds bytes as well as FLOPs and the intensity "
             "levels off below the ridge")
    real = (f"{br.real} reaches it at B ≈ {br.saturates_real}" if br.saturates_real else
            f"{br.real} does not reach it either")
    return (f"Predicted on an {gpu_name} in {gpu.dtype} (open points: nothing ran there), {model}; {real}. "
            "That one intensity counts every request's K/V as if one kernel overlapped its reads with the "
            "arithmetic. The attention reads each request's own K/V in kernels of its own, on the memory side at any "
            "batch, and their time adds to the products': counted so, the step stops being the weights' read at "
            f"B ≈ {_knee(br.knee_gpu)} for {br.model} and B ≈ {_knee(br.knee_real)} for {br.real}, sooner than that "
            "intensity says (estimates; the Scale page's pass over n rows measures where). Below that batch each more "
            "request adds only its own arithmetic and K/V reads to a step the weights' read sets: that is why servers "
            "batch.")


def _knee(n: float) -> str:
    """A predicted knee in words: a batch to the unit, or under 1 (the first request's own work already outlasts
    the weights' read)."""
    return f"{n:.0f}" if n >= 1 else f"{n:.1f} (under one request)"


# ---------------------------------------------------------------- every order, not the shipped one


def order_figure(o, scale: float = 1.0):
    """static/continuous engine steps over random orders of the same requests (topics.serving.orders
    .OrderSpread): a histogram of the random orders, the median and p10/p90 dashed, the shipped order a solid line."""
    import plotly.graph_objects as go

    from drawing.palette import layout

    width = 0.1  # bins whose edges fall just past the shipped order's ratio, so an order tied with it is drawn at
    edge = o.shipped + 1e-9  # its line and only an order above it is drawn to its right (edges at 2.4 and 2.5 put
    start = edge - width * (math.ceil((edge - min(o.ratios)) / width) + 1)  # 2.44's ties past its line)
    fig = go.Figure(go.Histogram(x=list(o.ratios), xbins=dict(start=start, end=max(*o.ratios, edge) + width,
                                                              size=width), marker_color="#9e9e9e",
                                 name=f"{o.orders} random orders",
                                 hovertemplate="×%{x}: %{y} orders<extra></extra>"))
    # one short word a line, the median's figure in the title: "median ×1.72" ran into p10's on a phone
    for x, label, dash in ((o.p10, "p10", "dot"), (o.median, "median", "dash"), (o.p90, "p90", "dot")):
        fig.add_vline(x=x, line_dash=dash, line_color=SOFT, annotation_text=label, annotation_position="top")
    shipped = "shipped order: " + ("most favourable " if o.shipped_is_most_favourable else "") + f"×{o.shipped:.2f}"
    # its words above the plot, a row over the others', ending at its line: beside the line, inside the plot, they
    # covered the bars left of it on a phone's narrow plot
    fig.add_vline(x=o.shipped, line_color=INK, line_width=2)
    fig.add_annotation(x=o.shipped, xref="x", y=1, yref="paper", xanchor="right", yanchor="bottom", yshift=20 * scale,
                       text=shipped, showarrow=False, font=dict(color=INK))
    fig.update_xaxes(title="static steps ÷ continuous steps")
    fig.update_yaxes(title="random orders")
    fig.update_layout(showlegend=False, bargap=0.05)
    return layout(fig, f"{o.orders} random orders: median ×{o.median:.2f}", height=300, scale=scale)


def order_sentence(o) -> str:
    """What the histogram says, in its own numbers."""
    c, s = o.shipped_steps
    where = ("the most favourable to continuous batching: no random order gave a bigger ratio"
             if o.shipped_is_most_favourable else
             f"{o.at_or_above_shipped:.0%} of the random orders were at least as favourable to continuous batching")
    return (f"The scenario ships one order of its requests: static batching takes {s} engine steps to continuous "
            f"batching's {c} (x{o.shipped:.2f}), {where}. Dealt into the same arrival steps in {o.orders} random "
            f"orders (seed {o.seed}), the same requests give a median of x{o.median:.2f} (p10 x{o.p10:.2f}, p90 "
            f"x{o.p90:.2f}): continuous batching still wins, by less than the shipped order shows. Counted by the real "
            "scheduler, no forward pass: with every request making all its tokens, the steps depend on the lengths "
            "and arrivals only (`python -m engine serve --scenario queue --compare-batching` prints the same).")
