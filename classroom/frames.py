"""What a class is shown, as bytes a browser draws by itself: a step's stage and views, a page's elements.

    step_frame(run, at, ...)              one step of the lecturer's step run: what it is (no pictures)
    stage_part(shared, at, layer, head)   its stage for one layer and head: SVG
    every_step_part(shared, at, layer, head)  Attention's one head, every step so far (the lecturer's switch)
    view_part(shared, at, view, layer)    one of its seven views: drawing/views.py's blocks, as JSON (every_row: the
                                          Attention view with every query row, as the lecturer's toggle draws it)
    block_json(block)                     a Block as {"kind", "html"} or {"kind": "figure", "spec"}
    md_html(text)                         engine-made markdown as HTML (markdown-it, raw HTML off)

A picture of a step is built once per server (classroom/hub.py keeps it) from the shared record, by the
same builders the step page uses; what a follower's tab receives is text it places: the stage's SVG (parsed
and placed inline), HTML made here (every user's word escaped), and plotly's own JSON for the few charts a
student opens.
"""

from __future__ import annotations

import json
import re
from html import escape

from markdown_it import MarkdownIt

from drawing.stage import stage_svg
from drawing.stage_phone import phone_stage_svg
from drawing.views import VIEWS, Block, StepContext, one_head_every_step, view_blocks

_MD = MarkdownIt("commonmark", {"html": False}).enable("table")
_COLOURED = re.compile(r":(blue|red|green|orange|violet|gray|grey|rainbow|primary)\[(.*?)\]")
_ICON = re.compile(r":material/[a-z_]+:")
COLOURS = {"blue": "#1f77b4", "red": "#d62728", "green": "#2ca02c", "orange": "#ff7f0e", "violet": "#9467bd",
           "gray": "#666", "grey": "#666", "rainbow": "#9467bd", "primary": "#ff4b4b"}


def md_html(text: str, inline: bool = False) -> str:
    """Markdown as Streamlit draws it (bold, code, lists, tables, `:blue[...]`), raw HTML shown as text."""
    out = _MD.renderInline(text) if inline else _MD.render(text)
    out = _ICON.sub("", out)
    return _COLOURED.sub(lambda m: f'<span style="color:{COLOURS[m.group(1)]}">{m.group(2)}</span>', out)


def latex_text(tex: str) -> str:
    """A formula as readable text: a follower's tab has no TeX renderer (nothing is fetched from a CDN)."""
    out = re.sub(r"\\begin\{\w+\}|\\end\{\w+\}|&", "", tex)
    out = re.sub(r"\\text\{([^}]*)\}", r"\1", out)
    out = re.sub(r"\\sum_\{([^}]*)\}", r"Σ_\1 ", out)
    for a, b in ((r"\times", "×"), (r"\_", "_"), (r"\\", " "), (r"\cdot", "·"), (r"\,", " "), ("\\ ", " "),
                 ("{", ""), ("}", "")):
        out = out.replace(a, b)
    return re.sub(r"\s+", " ", out).strip()


def table_html(df) -> str:
    """A table as the lecturer's st.table shows it: a named index is its first column, named in the one header row
    (pandas would give the index's name a header row of its own)."""
    if df.index.name is not None:
        df = df.reset_index()
    return df.to_html(escape=True, border=0, classes="dlf-table", index=False)


def block_json(b: Block) -> str:
    """One block as JSON text; a figure keeps plotly's own JSON (spec) for plotly.js in the tab."""
    if b.kind == "figure":
        return '{"kind":"figure","name":' + json.dumps(b.name) + ',"spec":' + b.value.to_json() + "}"
    if b.kind == "table":
        html = table_html(b.value)
    elif b.kind == "html":
        html = b.value
    elif b.kind == "text":  # may hold a visitor's words: inert
        html = f"<p>{escape(str(b.value))}</p>"
    elif b.kind in ("md", "caption", "note", "warn"):
        html = f'<div class="dlf-{b.kind}">{md_html(str(b.value))}</div>'
    elif b.kind == "metrics":
        html = '<div class="dlf-metrics">' + "".join(
            f'<div class="dlf-metric" title="{escape(why)}"><div class="dlf-metric-label">{escape(label)}</div>'
            f'<div class="dlf-metric-value">{escape(value)}</div></div>' for label, value, why in b.value) + "</div>"
    elif b.kind == "latex":
        html = f'<div class="dlf-latex">{escape(latex_text(str(b.value)))}</div>'
    else:
        html = f"<p>{escape(str(b.value))}</p>"
    return json.dumps({"kind": b.kind, "name": b.name, "html": html})


def blocks_json(blocks: list[Block]) -> bytes:
    return ('{"blocks":[' + ",".join(block_json(b) for b in blocks) + "]}").encode()


# ---------------------------------------------------------------- a step of the lecturer's step run


def step_frame(run: str, at: int, t, *, model: str, text: str, layers: int, heads: int, new_tokens: int,
               done: bool, stop: str | None) -> dict:
    """The manifest of step `at` of run `run` (t: its StepTrace). Its pictures are parts a server builds
    once from the record on first request: stage/{layer}/{head} and view/{view}/{layer}."""
    status = (f"<b>{new_tokens} new token{'s' if new_tokens != 1 else ''}</b> · step <b>{at}</b> ({t.phase}) · "
              f"KV cache <b>{t.kv_bytes:,} bytes</b>" + (f" · stopped: <b>{escape(stop)}</b>" if done and stop else ""))
    return {"id": f"{run}:{at}", "kind": "step", "page": "Step through", "label": f"step {at} ({t.phase})",
            "run": run, "at": at, "model": model, "status": status, "text": text,
            "layers": layers, "heads": heads, "views": list(VIEWS), "done": done}


def step_context(shared, at: int, layer: int, head: int = 0, every_row: bool = False) -> StepContext:
    t = shared.records[at]
    layer = max(0, min(int(layer), len(t.layers) - 1))
    return StepContext(records=tuple(shared.records[: at + 1]), ids=tuple(shared.ids), pieces=tuple(shared.pieces()),
                       prompt_len=shared.prompt_len, prompt=str(shared.fork.get("prompt", "")), spec=shared.spec,
                       text=shared.texts[at], layer=layer, head=head, pictures=True, every_row=every_row)


def stage_part(shared, at: int, layer: int, head: int, phone: bool = False) -> bytes:
    """The stage of step `at` (phone: laid out for a phone's width, drawing/stage_phone.py), as SVG bytes."""
    t = shared.records[at]
    draw = phone_stage_svg if phone else stage_svg
    return draw(t, shared.pieces(), shared.prompt_len, layer=layer, head=head).encode()


def every_step_part(shared, at: int, layer: int, head: int) -> bytes:
    """Attention's "one head, every step so far" at step `at`, the layer and head on screen (the lecturer's switch)."""
    c = step_context(shared, at, layer, head)
    said = (f"One head, every step so far (the lecturer's switch): the prefill's {c.prompt_len} rows, then one row per "
            "decode step.")
    return blocks_json([Block("caption", said), one_head_every_step(c)])


def view_part(shared, at: int, view: str, layer: int, every_row: bool = False) -> bytes:
    """One view of step `at`; every_row: Attention with every query row, one panel per head (the lecturer's toggle)."""
    blocks = view_blocks(view, step_context(shared, at, layer, every_row=every_row))
    if view == "Latency" and shared.latency_claim:  # what the lecturer's page says under it, from its server's ladder
        blocks.append(Block("caption", shared.latency_claim, "latency_claim"))
    return blocks_json(blocks)
