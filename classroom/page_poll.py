"""The class predicts, on the lecturer's step page: Ask the class, the votes filling in live, Reveal.

    held(run, at)        the step held back while a question is open: the class sees nothing of it yet
    held_back(run)       the same, read only: for the projector's words (step/page.py's status line)
    ask_buttons(where)   "Ask the class": what comes next, or K's shape after this step
    panel(run)           the open question with its votes (redrawn every second), or the revealed answer

Asking takes the step at once (one forward pass) and keeps the lecturer's screen, and the class's, on the step
before: the candidates are exactly the distribution the step chose from. Reveal shows the step, and the model's
probabilities beside the class's votes. Moving on without Reveal (▶ onto the step reveals it; Next token past
it, or Reset) closes the question; so does opening another page, asked or revealed (its screen replaces the step).
"""

from __future__ import annotations

import streamlit as st

from classroom import Refused, StoreDown
from classroom.poll import next_token_question, shape_question
from classroom.poll_draw import compact_html, poll_html
from classroom.server import classroom
from engine import DecodeLabError
from ui.step_state import on_screen, show_step
from ui.text import plain

KINDS = {"next": "What comes next?", "shape": "K's shape after this step?"}


def _lead():
    ss = st.session_state
    return ss.get("follow_lead"), ss.get("follow_pub")


def _say(message: str) -> None:
    st.session_state["follow_poll_msg"] = message


def _ask(kind: str) -> None:
    lecture, pub = _lead()
    steps = on_screen()
    run = steps.run
    if lecture is None or run is None or not steps.started:
        _say("Press Prefill first: a question is about the next step of a run.")
        return
    if steps.done:
        _say("This run has finished: there is no next step to ask about.")
        return
    if steps.at != steps.latest:
        _say("Go to the newest step first (▶): a question is about the step after it.")
        return
    before = run.records[-1]
    try:
        held = run.step()
    except DecodeLabError as e:
        _say(str(e))
        return
    context = run.lm.tokenizer.decode(run.ids[0, : held.kv_len].tolist(), skip_special_tokens=True)
    question = next_token_question(held, context) if kind == "next" else shape_question(held, before)
    question["at"] = len(run.records) - 1  # the step it is about: a follower looking back sees it only there
    try:
        qid = classroom().polls.ask(lecture, question)
        st.session_state["follow_q"] = {"run": id(run), "held": len(run.records) - 1, "qid": qid, "revealed": False}
        pub.again()  # the screen is the same; the question is new: every follower hears of it now
    except (Refused, StoreDown) as e:
        _say(str(e))


def _reveal() -> None:
    lecture, _ = _lead()
    q = st.session_state.get("follow_q")
    if lecture is None or q is None:
        return
    try:
        classroom().polls.reveal(lecture)
    except (Refused, StoreDown) as e:
        _say(str(e))
        return
    q["revealed"] = True
    show_step(q["held"])  # the class bar publishes the step, with the answer


def _close(lecture) -> None:
    st.session_state.pop("follow_q", None)
    try:
        classroom().polls.drop(lecture)
    except (Refused, StoreDown):
        pass


def _still_asked(lecture, qid: str) -> bool:
    """The class still has this question: another page the lecturer opened closes it (classroom/publisher.py)."""
    try:
        current = classroom().polls.current(lecture.code)
    except StoreDown:
        return True  # unreachable: keep what the lecturer sees; the class bar says the store is down
    return current is not None and current.get("qid") == qid


def held(run, at: int) -> int | None:
    """The first step the class must not see yet (a question about it is open), or None. Also closes a question
    the lecturer moved past: ▶ onto the held step reveals it; another step, a Reset or a new run drops it."""
    q = st.session_state.get("follow_q")
    lecture, pub = _lead()
    if q is None or lecture is None:
        return None
    if run is None or q["run"] != id(run) or len(run.records) <= q["held"] or at > q["held"] or \
            (q["revealed"] and at != q["held"]) or not _still_asked(lecture, q["qid"]):
        _close(lecture)
        if pub is not None:
            pub.again()
        return None
    if not q["revealed"] and at == q["held"]:
        _reveal()
        return None
    return None if q["revealed"] else q["held"]


def held_back(run) -> int | None:
    """The step an open question still holds back (after `held` has closed a stale one), or None; changes nothing.
    The projector is the class's screen too: its status line counts the steps before this one only."""
    q = st.session_state.get("follow_q")
    if q is None or q["revealed"] or run is None or q["run"] != id(run) or len(run.records) <= q["held"]:
        return None
    return q["held"]


def ask_buttons(where) -> None:
    """The class bar's "Ask the class" (a popover: two questions) or, while one is open, Reveal."""
    q = st.session_state.get("follow_q")
    if q is not None and not q["revealed"]:
        where.button("Reveal", key="follow_reveal", icon=":material/visibility:", type="primary", on_click=_reveal,
                     help="Show the step held back: the class sees the model's choice and its probabilities (after "
                          "the sampling settings) beside its votes")
        return
    with where.popover("Ask the class", icon=":material/how_to_vote:"):
        st.caption("Takes the next step now and holds it back: the class answers, then Reveal shows it.")
        for kind, label in KINDS.items():
            st.button(label, key=f"follow_ask_{kind}", on_click=_ask, args=(kind,), width="stretch")


def panel() -> None:
    """The question on the projector: its votes as they come (every second), or after Reveal the answer."""
    ss = st.session_state
    if ss.get("follow_poll_msg"):
        st.warning(plain(ss.pop("follow_poll_msg")), icon=":material/warning:")
    q = ss.get("follow_q")
    lecture, _ = _lead()
    if q is None or lecture is None:
        return
    if q["revealed"]:
        _draw(lecture.code, revealed=True)
    else:
        _live_votes(lecture.code)


@st.fragment(run_every=1.0)
def _live_votes(code: str) -> None:
    _draw(code, revealed=False)


def _draw(code: str, revealed: bool) -> None:
    try:
        room = classroom()
        question = room.polls.current(code)
        if question is None:
            return
        tally = question if not question["open"] else room.polls.tally(code)
    except StoreDown as e:
        st.warning(plain(str(e)))
        return
    with st.container(key="follow_poll_panel"):
        st.markdown(f"**{plain(question['text'])}**" + (f" · {tally['total']} vote"
                                                          f"{'s' if tally['total'] != 1 else ''} so far"
                                                          if not revealed else ""))
        # after the reveal one line of chips: the stage below stays on the projector's first screen
        st.html(compact_html(question, tally) if revealed else poll_html(question, tally, revealed=False))
