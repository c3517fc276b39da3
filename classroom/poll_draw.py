"""The class's answers to a question, as bars: the projector during a poll, and everyone after the reveal.

One row per choice: the class's votes (their share, and how many), then after the reveal the model's
probability beside them and the answer marked. Words the class typed are listed under it, as typed
(escaped: a word is never markup), without who typed them. HTML, so a page places it without a chart
library: a follower's tab draws it in a millisecond.
"""

from __future__ import annotations

from html import escape

from drawing.palette import DECODE, NEW

CLASS, MODEL = "#6a51a3", DECODE  # the class's votes, the model's probability


def _odds(p: float) -> str:
    """The model's probability as a share: "<1%" for a token it gave almost nothing, never "0%" for one it drew."""
    return "<1%" if 0 < p < 0.005 else f"{p:.0%}"


def _votes(n: int) -> str:
    return f"{n} vote{'s' if n != 1 else ''}"


def _typed(tally: dict) -> str:
    """The words the class typed, as typed (escaped), with how many typed each."""
    words = tally.get("words") or []
    return ", ".join(f"<b>{escape(w)}</b> ({int(n)})" for w, n in words)


def _bar(share: float, colour: str, label: str) -> str:
    """A bar its share of a track of fixed width, the label after the track: every bar on one scale, however long
    its label (a bar sized beside its label would shrink where the label is long)."""
    width = max(0.0, min(1.0, share)) * 100
    return (f'<div style="display:flex;align-items:center;gap:0.4em;min-height:1.35em">'
            f'<div style="flex:0 0 55%"><div data-role="poll-bar" style="height:1.1em;width:{width:.1f}%;'
            f'background:{colour};border-radius:3px;min-width:2px"></div></div>'
            f'<span style="white-space:nowrap">{escape(label)}</span></div>')


def compact_html(question: dict, tally: dict) -> str:
    """After the reveal, on the lecturer's page: every choice in one line of chips (its votes, the model's
    probability, the answer marked), so the stage below stays on the projector's first screen."""
    total = max(1, int(tally.get("total") or 0))
    counts, model = tally.get("counts") or {}, question.get("model") or {}
    chips = []
    for choice in question.get("choices", []):
        n, right = int(counts.get(choice, 0)), choice == question.get("answer")
        odds = f' · <span style="color:{MODEL}">model {_odds(float(model.get(choice, 0.0)))}</span>' if model else ""
        chips.append(f'<span class="dl-poll-row" data-testid="dl-poll-row" data-choice="{escape(choice)}" '
                     f'style="display:inline-block;margin:0 0.9em 0.2em 0;white-space:nowrap">'
                     f'<span style="font-family:ui-monospace,monospace;{"font-weight:700;color:" + NEW if right else ""}">'
                     f'{escape(choice)}{" ✓" if right else ""}</span> <span style="color:{CLASS}">{_votes(n)} '
                     f'({n / total:.0%})</span>{odds}</span>')
    typed = _typed(tally)  # what the students' screens list under their bars, on the projector too
    votes = int(tally.get("total") or 0)
    chips.append(f'<span style="display:inline-block;color:#555">{"Typed: " + typed + " · " if typed else ""}the '
                 f'class ({_votes(votes)})</span>')
    return (f'<div class="dl-poll" data-testid="dl-poll" data-votes="{votes}" '
            f'data-compact="1">' + "".join(chips) + "</div>")


def poll_html(question: dict, tally: dict, revealed: bool = False) -> str:
    """question: classroom/poll.py's (choices, answer, model); tally: Polls.tally's counts and words."""
    total = max(1, int(tally.get("total") or 0))
    counts = tally.get("counts") or {}
    model = question.get("model") or {}
    rows = []
    for choice in question.get("choices", []):
        n = int(counts.get(choice, 0))
        right = revealed and choice == question.get("answer")
        bars = _bar(n / total, CLASS, f"{_votes(n)} ({n / total:.0%})")
        if revealed and model:
            p = float(model.get(choice, 0.0))
            bars += _bar(p, MODEL, f"model {_odds(p)}")
        rows.append(f'<div class="dl-poll-row" data-testid="dl-poll-row" data-choice="{escape(choice)}" style="display:grid;'
                    f'grid-template-columns:minmax(5em,8em) 1fr;gap:0.6em;align-items:center;padding:0.2em 0;'
                    f'border-bottom:1px solid #eee">'
                    f'<div style="font-family:ui-monospace,monospace;font-size:1.15em;overflow-wrap:anywhere;'
                    f'{"font-weight:700;color:" + NEW if right else ""}">{escape(choice)}{" ✓" if right else ""}'
                    f'</div><div>{bars}</div></div>')
    typed = _typed(tally)
    typed = f'<div style="margin-top:0.4em;color:#555">Typed: {typed}</div>' if typed else ""
    key = (f'<div style="margin-top:0.3em;font-size:0.85em;color:#555"><span style="color:{CLASS}">■</span> the '
           f'class ({_votes(int(tally.get("total") or 0))})' +
           (f' · <span style="color:{MODEL}">■</span> the model\'s probability' if revealed and model else "") +
           "</div>")
    return (f'<div class="dl-poll" data-testid="dl-poll" data-votes="{int(tally.get("total") or 0)}">'
            + "".join(rows) + typed + key + "</div>")
