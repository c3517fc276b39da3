"""What the speculative-decoding page and lesson 9 both show: a round's tokens, its verify pass, the totals.

Not a page of its own (app.py's navigation lists the pages); the page and the lesson call into it.
"""

from __future__ import annotations

import html
from functools import partial

import pandas as pd
import streamlit as st

from drawing.palette import DECODE, NEW, PREFILL, RECOMPUTED, show_piece
from drawing.stage_phone import stage_pictures
from engine import DecodeLabError
from engine.generate.drafters import DraftModel, PromptLookup
from engine.generate.loop import token_pieces
from engine.generate.speculative import Speculator
from engine.load.load import DRAFT_MODEL
from topics.speculative.measure import Comparison, measure
from ui.model import get_model
from ui.text import error, plain


def drafter_for(choice: str, settings):
    """The drafter a user picked: the bundled draft model, or prompt lookup with n-grams up to n."""
    if choice == "draft model":
        return DraftModel(get_model(DRAFT_MODEL, settings.device, settings.dtype))
    return PromptLookup(int(choice.split("≤ ")[1].split(")")[0]))


DRAFTERS = ["draft model", "prompt lookup (n-gram ≤ 3)", "prompt lookup (n-gram ≤ 2)"]
DRAFTER_LINKS = dict(zip(("draft", "lookup3", "lookup2"), DRAFTERS))  # a drafter's name in a link
SELF_DRAFT = (f"The model on screen is the bundled draft model ({DRAFT_MODEL}) itself: drafting with it costs a pass "
              "as large as the one that checks, and its guesses are always its own next tokens, so every one is kept "
              "and nothing is saved.")


def drafts_itself(choice: str, lm) -> bool:
    """Would the drafter picked be the model it drafts for (the draft model loaded as the target)?"""
    return choice == "draft model" and lm.spec.name == DRAFT_MODEL


def _chip(text: str, style: str, title: str, size: str = "1.05rem") -> str:
    return (f'<span title="{html.escape(title)}" style="display:inline-block;margin:2px;padding:2px 7px;'
            f'border-radius:6px;font-family:monospace;font-size:{size};{style}">{html.escape(show_piece(text))}</span>')


def rounds_html(run: Speculator, upto: int, dense: bool = False, last: int | None = None) -> str:
    """Every round so far, its label beside its chips: proposals pale, accepted solid, the rejected tail struck
    out, and the target's own token (the correction, or the bonus after all k were kept). `dense`: smaller lines, for
    a list beside a stage (lesson 9's first screen). `last`: only the latest rounds up to `upto`, each label above its
    chips, under a line that says how many earlier ones the table below holds (the page's list in a 2/5 column on a
    projector: 12 rounds ran ~700 px below the stage, and 5 chips beside a label wrapped)."""
    size, text, line_h = ("0.92rem", "0.9em", 1.45) if dense else ("1.05rem", "1em", 2)
    chip = partial(_chip, size=size)
    first = 0 if last is None else max(0, upto + 1 - last)
    label_w = "12.5em" if last is None else "100%"  # the page's list of the latest, in a 2/5 column: labels above
    lines = [f"<div style='margin:2px 0;color:#555'>… {first} earlier round{'s' if first > 1 else ''} "
             f"(every round is in the table below)</div>"] if first else []
    for r in run.records[first: upto + 1]:
        chips = []
        if r.round == 0:
            chips.append(chip(r.token, f"background:{PREFILL}33", "the prefill's token"))
        for tok, outcome in zip(r.proposed_tokens, r.outcomes):
            if outcome == "accepted":
                chips.append(chip(tok, f"background:{DECODE}55;border:2px solid {DECODE}", "proposed and accepted"))
            elif outcome == "rejected":
                chips.append(chip(tok, f"background:#fff;border:2px solid {RECOMPUTED};color:{RECOMPUTED};"
                                       "text-decoration:line-through", "proposed and rejected"))
            else:
                chips.append(chip(tok, "background:#f3f3f3;color:#999;text-decoration:line-through",
                                  "proposed, never checked (after a rejection)"))
        if r.round:
            chips.append(chip(r.token, f"background:{NEW}33;border:2px solid {NEW}",
                              f"the target's own token ({r.token_kind})"))
        label = "prefill" if r.round == 0 else f"round {r.round}: {r.accepted}/{r.proposed} kept + {r.token_kind}"
        lines.append(f"<div style='display:flex;flex-wrap:wrap;align-items:center;margin:3px 0'>"  # beside its chips
                     f"<span style='flex:0 0 {label_w};font-size:0.9em;line-height:1.3;color:#555'>"  # where they fit
                     f"{html.escape(label)}</span><span>{''.join(chips)}</span></div>")
    return f"<div style='line-height:{line_h};font-size:{text}'>" + "".join(lines) + "</div>"


def verify_stage(run: Speculator, i: int, layer: int = 0, head: int = 0) -> str:
    """The stage of round i's target pass: k+1 rows in, the columns of rejected guesses written and then cut."""
    r = run.records[i]
    known = token_pieces(run.lm.tokenizer, run.ids[0, : r.past].tolist())
    pieces = known + list(r.target.fed_tokens)
    if r.round == 0:
        title = "Prefill (initiation phase) · round 0 · the target's first pass"
    elif not r.proposed_ids:  # prompt lookup found no n-gram: the round list says "0/0 kept + plain"
        title = f"Plain decode step · round {r.round} · nothing proposed, 1 row in one pass"
    else:
        title = (f"Verify · round {r.round} · {r.q_len} row{'s' if r.q_len != 1 else ''} checked in one pass · "
                 f"{r.cut} column{'s' if r.cut != 1 else ''} cut")
    return stage_pictures(r.target, pieces, run.prompt_len, layer=layer, head=head, rejected_from=r.rejected_from,
                          title=title)  # a phone's layout too


def totals(run: Speculator, at: int | None = None) -> None:
    """The run's totals, two by two. `at`: the round the stage shows; where it is an earlier one, the caption says
    the tiles are the whole run's."""
    top, bottom = st.columns(2), st.columns(2)  # two by two: the labels stay whole in a narrow column
    top[0].metric("acceptance rate", "—" if run.acceptance_rate is None else f"{run.acceptance_rate:.0%}",
                  help="proposals kept / proposals made")
    top[1].metric("tokens per verify pass", "—" if run.tokens_per_target_pass is None
                  else f"{run.tokens_per_target_pass:.2f}",
                  help="tokens the verify passes added, over the verify passes; plain decoding's decode steps make 1")
    bottom[0].metric("verify passes", f"{run.verify_passes}",
                     help=f"the target's passes after the prefill; with the prefill, {run.target_passes}")
    bottom[1].metric("passes saved", f"{run.target_passes_saved}", help="against one target pass per token")
    whole = run.verify_passes
    st.caption(("" if at is None or at >= whole else
                f"These are the whole run's totals, rounds 1–{whole}; the stage shows round {at}. ")
               + f"'Tokens per verify pass' and 'verify passes' count the verify passes only: the prefill is one "
               f"more target pass ({run.target_passes} in all) and chose the first token, so it is in neither.")


def comparison(m: Comparison) -> None:
    c = st.columns(5)
    base, spec = m.plain_ms_per_token_runs, m.speculative_ms_per_token_runs
    for tile, name, median, runs in ((c[0], "plain", m.plain_ms_per_token, base),
                                     (c[1], "speculative", m.speculative_ms_per_token, spec)):
        tile.metric(f"{name}: ms per token", f"{median:.2f}", delta_color="off", delta_arrow="off",
                    delta=f"runs {min(runs):.2f}–{max(runs):.2f}" if len(runs) > 1 else None,
                    help=f"the median of {len(runs)} runs; under it, the fastest and the slowest")
    spread = (f"runs ×{min(base) / max(spec):.2f}–×{max(base) / min(spec):.2f}"  # holds ×1 where the runs overlap,
              if len(base) > 1 and len(spec) > 1 else None)                        # as the verdict under it says
    c[2].metric("measured speed-up", f"×{m.speedup:.2f}", delta=spread, delta_color="off", delta_arrow="off",
                help="plain over speculative ms per token, medians; under it, the fastest and slowest runs' ratios")
    c[3].metric("paper's formula", f"×{m.predicted_speedup:.2f}",
                help="Leviathan et al. 2023: E / (k·c + 1), E = (1 − α^(k+1)) / (1 − α), c = a draft step over a "
                     "one-row target step; from the measured α and c")
    c[4].metric("predicted with this pass's costs", f"×{m.predicted_with_overhead:.2f}",
                help="E·(1 + o_step) / (k·c + r + o_round): r the verify pass in one-row steps, o the measured time "
                     "outside the passes per round and per plain step, in one-row steps")
    st.markdown(plain(m.verdict))
    st.caption(f"Same prompt, same length, in this process, alternated {m.repeats} times after a warm-up of each "
               "(excluded); medians. The paper's formula (Leviathan et al. 2023) uses the measured α (kept / checked) "
               f"= {m.alpha:.2f} and its own c = {m.cost_ratio_c:.3f} (a draft step over a one-row target step); "
               f"it assumes the verify pass over k + 1 rows costs one step (here r = {m.verify_cost_r:.2f}: the median "
               f"verify pass over {m.verify_rows} rows, of {m.verify_rounds} rounds, over the median one-row pass of "
               f"the plain runs, each pass timed once as it "
               "ran, at every cache length; lesson 9's ratio times one verify pass and a one-row pass on the same "
               "cache, three runs each) and counts passes, not the time between them.")


def rounds_frame(run: Speculator) -> pd.DataFrame:
    return pd.DataFrame([{"round": r.round, "proposed": " ".join(show_piece(t) for t in r.proposed_tokens),
                          "kept": r.accepted, "target's token": show_piece(r.token), "kind": r.token_kind,
                          "q_len": r.q_len, "cache before (past)": r.past, "after verify": r.cache_after_verify,
                          "after crop": r.cache_after_crop, "draft ms": round(sum(r.draft_ms), 3),
                          "verify ms": round(r.verify_ms, 3)} for r in run.records])


def measured_comparison(lm, prompt: str, new_tokens: int, choice: str, k: int, settings) -> Comparison | None:
    try:
        return measure(lm, prompt, new_tokens, drafter_for(choice, settings), k=k, sampling=settings.sampling,
                       stop_strings=settings.stop_strings)
    except DecodeLabError as e:
        error(str(e))
        return None
