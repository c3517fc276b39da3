"""Lookahead decoding (Fu et al. 2024) as one picture: one forward pass, three branches, drawn from its figures.

    the input          the tokens so far, in the KV cache, and the current token (1 row)
    lookahead branch   N-1 levels of W future positions: Jacobi iteration re-guesses each position from the
                       guesses before it; every finished column is an n-gram for the pool
    verification       G n-grams from the pool that start with the current token, N-1 tokens each, checked
                       the way a speculative verify pass checks k guesses

All of them go through the model in ONE pass of 1 + W·(N-1) + G·(N-1) rows, each branch with its own
attention mask; the longest verified n-gram is kept, the rest cut. A figure of the method, not of a run:
the engine does not implement lookahead decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

from drawing.palette import DECODE, NEW, PREFILL
from drawing.svg import INK, SOFT, W, arrow, defs, picture_html, text


@dataclass(frozen=True)
class Lookahead:
    """The figures of one lookahead pass: window W, n-gram size N, verification candidates G."""

    window: int = 5
    ngram: int = 4
    guesses: int = 2

    @property
    def levels(self) -> int:
        """Rows of the lookahead branch: the N-1 most recent Jacobi iterations."""
        return self.ngram - 1

    @property
    def lookahead_rows(self) -> int:
        return self.window * self.levels

    @property
    def verify_rows(self) -> int:
        return self.guesses * (self.ngram - 1)

    @property
    def rows(self) -> int:
        """Rows the one forward pass computes: the current token, the lookahead branch, the verification branch."""
        return 1 + self.lookahead_rows + self.verify_rows


def _cells(x: float, y: float, n: int, colour: str, label, w: float = 46, h: float = 30, gap: float = 6) -> str:
    out = []
    for i in range(n):
        out.append(f'<rect x="{x + i * (w + gap):.1f}" y="{y:.1f}" width="{w}" height="{h}" rx="4" fill="{colour}" '
                   f'fill-opacity="0.35" stroke="{colour}" stroke-width="1.5"/>'
                   + text(x + i * (w + gap) + w / 2, y + h / 2 + 5, label(i), 12, "middle"))
    return "".join(out)


def lookahead_svg(plan: Lookahead = Lookahead()) -> str:
    """The picture: three labelled branches side by side, the row count of the one pass underneath."""
    gap = 8
    (x0, e0), (x1, e1), (x2, e2) = (10, 170), (200, 620), (650, 990)  # each branch's panel, left to right
    width = W
    look_cw = min(60.0, (e1 - x1 - 24) / plan.window - gap)
    ver_cw = min(60.0, (e2 - x2 - 24) / (plan.ngram - 1) - gap)
    top, body_h = 70, 34 + max(plan.levels, plan.guesses) * 38 + 40
    out = [defs()]

    # 1 · the input: the cache and the current token
    out.append(f'<g data-role="branch" data-branch="input"><rect x="{x0}" y="{top}" width="{e0 - x0}" '
               f'height="{body_h}" rx="8" fill="{PREFILL}" fill-opacity="0.08" stroke="{PREFILL}" stroke-width="2"/>'
               + text(x0 + 6, top - 30, "1 · the input", 17, weight="bold")
               + text(x0 + 6, top - 10, "1 row", 13, fill=SOFT)
               + text(x0 + 14, top + 34, "KV cache:", 13, fill=SOFT)
               + text(x0 + 14, top + 54, "the tokens so far", 13, fill=SOFT)
               + _cells(x0 + 14, top + 76, 1, NEW, lambda i: "t", w=60)
               + text(x0 + 14, top + 128, "current token", 13, fill=SOFT) + '</g>')
    out.append(arrow(e0 + 4, top + 91, x1 - 4, top + 91, width=2))

    # 2 · the lookahead branch: N-1 levels of W guesses, refined by Jacobi iteration
    rows = "".join(_cells(x1 + 12, top + 34 + lv * 38, plan.window, DECODE,
                          lambda i, lv=lv: f"t+{i + lv + 1}", w=look_cw, gap=gap) for lv in range(plan.levels))
    out.append(_branch("lookahead", x1, e1, top, body_h, DECODE, "2 · lookahead branch",
                       f"W = {plan.window} positions × N−1 = {plan.levels} levels = {plan.lookahead_rows} rows",
                       "Jacobi: each level re-guesses from the one above", rows, "finished columns → n-gram pool"))

    # 3 · the verification branch: G candidate n-grams that start with the current token
    grams = "".join(_cells(x2 + 12, top + 34 + g * 38, plan.ngram - 1, NEW, lambda i, g=g: f"g{g + 1}·{i + 1}",
                           w=ver_cw, gap=gap) for g in range(plan.guesses))
    out.append(_branch("verification", x2, e2, top, body_h, NEW, "3 · verification branch",
                       f"G = {plan.guesses} n-grams × {plan.ngram - 1} tokens = {plan.verify_rows} rows",
                       "from the pool, starting with t", grams, "checked like k guesses"))
    y = top + body_h + 34
    out.append(text(10, y, f"ONE forward pass of 1 + {plan.lookahead_rows} + {plan.verify_rows} = {plan.rows} rows, "
                           "each branch with its own attention mask;", 15, fill=INK, weight="bold"))
    out.append(text(10, y + 26, "the longest verified n-gram is kept (several tokens for one pass), the rest is cut.",
                    15, fill=INK))
    height = y + 40
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" width="100%" '
            f'role="img" data-role="lookahead" data-rows="{plan.rows}">' + "".join(out) + '</svg>')


def lookahead_html(plan: Lookahead = Lookahead()) -> str:
    """The picture as an <img>, with its words as the alternative text."""
    alt = (f"Lookahead decoding: one pass of {plan.rows} rows in three branches: the input (1 row), a lookahead "
           f"branch of {plan.levels} levels × {plan.window} positions, a verification branch of {plan.guesses} "
           f"n-grams of {plan.ngram - 1} tokens")
    return picture_html(lookahead_svg(plan), alt, "dl-lookahead")


def _branch(name: str, x: float, end: float, top: float, height: float, colour: str, title: str, size: str,
            how: str, cells: str, then: str) -> str:
    """One labelled branch of the pass: its box, its title and row count, how it guesses, its cells, what follows."""
    return (f'<g data-role="branch" data-branch="{name}"><rect x="{x}" y="{top}" width="{end - x}" '
            f'height="{height}" rx="8" fill="{colour}" fill-opacity="0.08" stroke="{colour}" stroke-width="2"/>'
            + text(x + 6, top - 30, title, 17, weight="bold") + text(x + 6, top - 10, size, 13, fill=SOFT)
            + text(x + 12, top + 22, how, 13, fill=SOFT) + cells
            + text(x + 12, top + height - 10, then, 13, fill=SOFT) + '</g>')
