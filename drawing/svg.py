"""SVG primitives the stage (and every picture drawn as an <img> of an SVG) is made of: text, arrows, patterns.

Every piece of text goes through `text`, which escapes it: nothing typed by a user reaches an SVG as markup.
"""

from __future__ import annotations

from html import escape

from drawing.palette import MASKED, NEW, RECOMPUTED

W = 1000  # viewBox width; the browser scales it to the column
TEXT = 1.22  # every font size below is multiplied by this: the stage is read from the back of a room
FONT = "ui-sans-serif, system-ui, sans-serif"
MONO = "ui-monospace, Menlo, Consolas, monospace"
INK, SOFT = "#222", "#666"
QCOL = "#8c6bb1"  # queries: used once
LABEL_X = 140  # the opened layer's labels start here
GRID_X0, GRID_X1 = 420, 945  # where the key columns live (K, V and the scores share them)
LOOP_X = 980  # the lane the chosen token takes back up to the strip: right of the columns, their tilted labels
              # (up to ~30 past GRID_X1) and "keys read", so the dashed loop crosses none of them


def text(x, y, text, size=18, anchor="start", fill=INK, weight="normal", family=FONT, extra=""):
    size = round(size * TEXT, 1)
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}" '
            f'font-weight="{weight}" font-family="{family}" {extra}>{escape(str(text))}</text>')


MONO_EM = 0.62  # a monospace glyph's advance, in font sizes (DejaVu Sans Mono: 0.602), with a little to spare


def mono_width(text: str, size: float) -> float:
    """Width in viewBox units of `text` set in MONO at `size` (before the TEXT factor, as `text` takes it)."""
    return len(text) * MONO_EM * size * TEXT


# a proportional glyph's advance, in font sizes (DejaVu Sans, the widest fallback, with a little to spare)
PROP_EM = 0.6
BOLD = 1.1  # a bold glyph's advance over a regular one


def text_width(text: str, size: float, bold: bool = False, mono: bool = False) -> float:
    """Width in units of `text` in the proportional font (or MONO) at `size` (before TEXT, as `text` takes it): the
    one estimate every picture wraps and spaces its words by."""
    return mono_width(text, size) if mono else len(text) * PROP_EM * size * TEXT * (BOLD if bold else 1.0)


def mono_fit(text: str, size: float, width: float) -> float:
    """The largest font size up to `size` at which `text` in MONO fits `width`: a long token (<|endoftext|>)
    shrinks to fit its box instead of spilling out of it or off the picture."""
    need = mono_width(text, size)
    return size if need <= width or need <= 0 else max(6.0, size * max(1.0, width) / need)


def shape_text(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]" if shape else "[?]"


def blues(w: float) -> str:
    """A weight in [0, 1] as a blue: white (0) to deep blue (1)."""
    w = max(0.0, min(1.0, w)) ** 0.6  # small weights stay visible
    r, g, b = (int(255 + (c - 255) * w) for c in (8, 48, 107))
    return f"rgb({r},{g},{b})"


def defs() -> str:
    return ('<defs>'
            f'<pattern id="masked" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
            f'<rect width="6" height="6" fill="#f2f2f2"/><line x1="0" y1="0" x2="0" y2="6" stroke="{MASKED}" stroke-width="3"/></pattern>'
            f'<pattern id="recomputed" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
            f'<rect width="6" height="6" fill="#f7c9c9"/><line x1="0" y1="0" x2="0" y2="6" stroke="{RECOMPUTED}" stroke-width="3"/></pattern>'
            '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
            f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{SOFT}"/></marker>'
            '<marker id="arrow-new" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
            f'<path d="M 0 0 L 10 5 L 0 10 z" fill="{NEW}"/></marker>'
            '</defs>')


def arrow(x1, y1, x2, y2, colour=SOFT, marker="arrow", dash="", width=2, role=""):
    d = f' stroke-dasharray="{dash}"' if dash else ""
    r = f' data-role="{role}"' if role else ""
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}" stroke-width="{width}"'
            f'{d} marker-end="url(#{marker})"{r}/>')


def data_uri(svg: str | bytes) -> str:
    """An SVG as an <img> source (st.html strips inline SVG): a picture can run no script and fetch nothing."""
    import base64

    raw = svg.encode("utf-8") if isinstance(svg, str) else svg
    return "data:image/svg+xml;base64," + base64.b64encode(raw).decode("ascii")


def picture_html(svg: str, alt: str, testid: str, phone: str | None = None) -> str:
    """Any drawn picture as an <img> of its SVG. A phone scrolls a wide picture sideways (ui/style.py); `phone`, the
    same picture laid out for a phone's width, is shown there instead, whole."""
    style = "display:block;width:100%;height:auto"
    if phone is None:
        return (f'<div class="dl-picture" data-testid="{escape(testid)}"><img alt="{escape(alt)}" '
                f'src="{data_uri(svg)}" style="{style}"/></div>')
    return (f'<div class="dl-picture dl-picture-fits" data-testid="{escape(testid)}">'
            f'<img class="dl-picture-wide" alt="{escape(alt)}" src="{data_uri(svg)}" style="{style}"/>'
            f'<img class="dl-picture-phone" alt="{escape(alt)}" src="{data_uri(phone)}" style="{style}"/></div>')
