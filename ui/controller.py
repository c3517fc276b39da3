"""One run controller for every page that steps: the cursor, the buttons, Run to end, the finished state.

A page gives it a session-state prefix and a way to make a run (a Stepper, a Speculator, a ServingRun:
each has `records`, `step()`, `done`, `run(n)`, `free()`); the controller keeps

    {prefix}_run      the run (freed on Reset, on a new prompt or model, when the session ends)
    {prefix}_at       the step on screen (the cursor): any recorded step can be shown again
    {prefix}_key      what the run was made with; when it changes, the run is made again or dropped (`sync`)
    {prefix}_replay   a number of steps to take as soon as the page knows its settings (a link, a scenario)

and draws the buttons in the state their callbacks left (callbacks run before the page is drawn), so a
finished run's Next token is never enabled. Run to end and Autoplay back off when the server is busy
(0.5, 1, 2, 4, 8 s) and say so; they never spin.
"""

from __future__ import annotations

import secrets
import time
from typing import Callable

import streamlit as st
from streamlit.errors import StreamlitAPIException

from engine import DecodeLabError
from engine.errors import Busy
from physics.machine import release_memory
from ui.setup import not_a_screen

BUSY_WAITS = (0.5, 1, 2, 4, 8)  # seconds between retries when the server is busy: back off, never spin
STOPPED = {  # a run's stop reason, in words
    "eos": "the model chose its end-of-text token",
    "max_new_tokens": "it reached max new tokens",
    "stop_string": "a stop string appeared in the text",
    "context_limit": "the model's context is full",
}


def rerun_here() -> None:
    """Run again what is running: the fragment when a fragment called, else the whole page."""
    try:
        st.rerun(scope="fragment")
    except StreamlitAPIException:  # this run is the whole app's (a sidebar change, presenter mode)
        st.rerun()


class Controller:
    """The run of one page in one browser session, and the buttons that step it."""

    def __init__(self, prefix: str, make: Callable[[], object], noun: str = "step", link_steps: str | None = None):
        self.prefix = prefix
        self.make = make  # a new run with the page's current settings (may raise DecodeLabError)
        self.noun = noun  # "step", "round", "engine step": what one click of Next makes
        self.link_steps = link_steps  # the link parameter in which the page writes its steps taken, if it does

    def _key(self, name: str) -> str:
        return f"{self.prefix}_{name}"

    # ------------------------------------------------------------ state

    @property
    def run(self):
        return st.session_state.get(self._key("run"))

    @property
    def run_id(self) -> str:
        """The run on screen, named apart from any earlier run of this page (a new one at each Reset)."""
        return f"{self.prefix}-{st.session_state.get(self._key('run_id'), '0')}"

    @property
    def records(self) -> list:
        run = self.run
        return run.records if run is not None else []

    @property
    def started(self) -> bool:
        return bool(self.records)

    @property
    def done(self) -> bool:
        return self.started and self.run.done

    @property
    def latest(self) -> int:
        return len(self.records) - 1

    @property
    def at(self) -> int:
        """The step on screen, kept inside what was recorded."""
        return max(0, min(int(st.session_state.get(self._key("at"), 0)), max(self.latest, 0)))

    def show(self, at: int) -> None:
        st.session_state[self._key("at")] = at

    def say(self, message: str) -> None:
        """A plain message the page shows once, at its next run (a refusal, a busy server)."""
        st.session_state[self._key("error")] = message

    def said(self) -> str | None:
        return st.session_state.pop(self._key("error"), None)

    def notice(self) -> str | None:
        """Why the run on screen was made again (a setting changed), once."""
        return st.session_state.pop(self._key("notice"), None)

    def stopped(self) -> str | None:
        """Why a finished run stopped, in words; None while it can go on."""
        if not self.done:
            return None
        reason = getattr(self.run, "stop_reason", None)
        return STOPPED.get(reason, "every request has finished" if reason is None else str(reason))

    # ------------------------------------------------------------ actions (button callbacks)

    def _try(self, action) -> bool:
        try:
            action()
            return True
        except DecodeLabError as e:
            self.say(str(e))
            return False

    def start(self) -> bool:
        """A new run, and its first step (the prefill); the cursor on it. A button's callback (or a run before the
        page draws its widgets): the Autoplay switch goes off with the old run."""
        self.reset()
        return self._begin()

    def _begin(self) -> bool:
        """A new run and its first step, touching no widget's key (Run to end calls it after the page drew them:
        Streamlit refuses a change to a drawn widget's value, and a run that has not started has nothing to stop)."""
        self._drop()

        def begin():
            run = self.make()
            st.session_state[self._key("run")] = run
            st.session_state[self._key("run_id")] = secrets.token_hex(4)  # names the run's steps in a class
            run.step()

        ok = self._try(begin)
        self.show(0)
        return ok

    def next(self) -> None:
        """One more step, shown (from wherever the cursor was). A click made on a screen that did not show the step
        the last click took is the second half of a double click: it takes no step (see `_too_soon`)."""
        if self._too_soon():
            return
        if self.done:
            self.say(f"This run has finished: {self.stopped()}. Press Reset to start again.")
            return
        if self._try(self.run.step):
            self.show(self.latest)

    def forward(self) -> None:
        """→: start, or show the next recorded step, or at the newest compute one more."""
        if not self.started:
            self.start()
        elif self.at < self.latest:
            self.show(self.at + 1)
        elif not self.done:
            self.next()

    def back(self) -> None:
        self.show(max(0, self.at - 1))

    def _drop(self) -> None:
        old = st.session_state.pop(self._key("run"), None)
        if old is not None:
            old.free()
            release_memory()

    def reset(self) -> None:
        self._drop()
        st.session_state[self._key("autoplay")] = False
        st.session_state[self._key("to_end")] = False

    def ask_run_to_end(self) -> None:
        st.session_state[self._key("to_end")] = True

    def _too_soon(self) -> bool:
        """Was this click made on a screen that did not show the newest step yet (a double click's second half)?

        A double click's two clicks reach the server folded into one rerun; or the second interrupts the run the
        first started; or it waits and is handled the moment that run ends. The second was made before the first's
        step reached the browser, and every click sends the address its browser shows: that link still counts the
        steps before (`link_steps`), so it takes no step. (Timing alone cannot tell it from a press made on seeing
        the step: both can come a few milliseconds after the run.)"""
        if not self.link_steps:
            return False
        shown = st.query_params.get(self.link_steps)
        return shown is not None and shown.isdigit() and int(shown) < self.latest

    # ------------------------------------------------------------ runs made again

    def replay(self, steps: int, at: int | None = None) -> None:
        """Start, then take `steps` more steps (fewer if the run stops): what a link or a scenario asks for."""
        if not self.start():
            return
        run = self.run
        for _ in range(max(0, steps)):
            if run.done or not self._try(run.step):
                break
        self.show(self.latest if at is None else max(0, min(at, self.latest)))

    def queue_replay(self, steps: int, at: int | None = None) -> None:
        """Replay once the page knows its settings (a scenario picked inside a fragment needs a full run first)."""
        st.session_state[self._key("replay")] = (steps, at)
        st.session_state[self._key("app_rerun")] = True

    def replay_queued(self) -> bool:
        """Take a replay queued by a link, a scenario or a fork; True if one ran."""
        queued = st.session_state.pop(self._key("replay"), None)
        if queued is None:
            return False
        steps, at = queued if isinstance(queued, tuple) else (queued, None)
        self.replay(int(steps), at)
        return True

    def app_rerun_if_asked(self) -> None:
        """Inside a fragment: a change that the sidebar's settings must see first reruns the whole app."""
        if st.session_state.pop(self._key("app_rerun"), False):
            st.rerun()

    def settings_changed(self, old, new) -> str | None:
        """The usual rule for a key (settings, *inputs): new inputs (a prompt, a scenario) or another model start
        afresh (None); a change of settings alone makes the run again, and says so (`sync` adds how far it got)."""
        (old_settings, *old_inputs), (new_settings, *new_inputs) = old, new
        if old_inputs != new_inputs or not new_settings.same_model(old_settings):
            return None
        changed = " and ".join(new_settings.changes(old_settings)) or "a setting"
        return f"You changed {changed}: the run was made again with it"

    def sync(self, key, again: Callable[[object, object], str | None] | None = None) -> None:
        """The run belongs to `key` (what it was made with). When the key changes, `again(old, new)` (by default
        `settings_changed`) says whether the run is made again for the same steps (it returns why, which the page
        shows once) or dropped (None). A replay already queued (a scenario, a fork) wins over both."""
        again = again or self.settings_changed
        old = st.session_state.get(self._key("key"))
        st.session_state[self._key("key")] = key
        if old is None or old == key or not self.started:
            return
        steps, at = self.latest, self.at
        why = again(old, key)
        self.reset()
        if why and self._key("replay") not in st.session_state:
            self.replay(steps, at)
            made = self.latest  # the new setting can end the run sooner (fewer new tokens, a stop string)
            st.session_state[self._key("notice")] = why + (
                f" for the same {steps} {self.noun}s" if made >= steps else
                f"; it stopped after {made} of the {steps} {self.noun}s, as the new setting ends it"
            ) + ", so what you see now is the new setting's."

    # ------------------------------------------------------------ drawing

    def buttons(self, bar, *, first: str | None = "Prefill", next_label: str | None = "Next token",
                forward_label: str = "▶", first_help: str = "", next_help: str = "") -> None:
        """Prefill, ◀, ▶, Next, Run to end and Reset, each in the state the last click left.

        first=None: no Prefill button (▶ and Run to end start the run); next_label=None: no Next (▶ computes)."""
        started, done, running = self.started, self.done, bool(st.session_state.get(self._key("to_end")))
        if st.session_state.pop(self._key("follow"), False):  # autoplay stepped after the scrubber was drawn
            self.show(self.latest)
        at, latest = self.at, self.latest
        self.show(at)  # the scrubber (drawn after the buttons) starts inside what was recorded
        k = self._key
        if first:
            bar.button(first, type="primary", disabled=started or running, key=k("btn_prefill"),
                       on_click=self.start, shortcut="P", help=first_help or f"{first} (P)")
        bar.button("◀", disabled=not started or at == 0 or running, key=k("btn_back"), on_click=self.back,
                   shortcut="left", help=f"Show the previous {self.noun} (←)")
        bar.button(forward_label, type="secondary" if first else "primary",
                   disabled=(first is not None and not started) or (done and at == latest) or running,
                   key=k("btn_forward"), on_click=self.forward, shortcut="right",
                   help=f"Show the next recorded {self.noun}; at the newest, compute one more (→)")
        if next_label:
            bar.button(next_label, type="primary", disabled=not started or done or running, key=k("btn_next"),
                       on_click=self.next, shortcut="N", help=next_help or f"One more {self.noun} (N)")
        bar.button("Run to end", disabled=(first is not None and not started) or done or running, key=k("btn_run"),
                   on_click=self.ask_run_to_end, shortcut="E", help="Step until the run stops (E)")
        bar.button("Reset", key=k("btn_reset"), on_click=self.reset, shortcut="X", help="Forget this run (X)")

    def run_to_end_if_asked(self, total: Callable[[], float] | None = None) -> None:
        """Step until the run stops, with a progress bar; when the server is busy, wait longer each time and say so.
        Then draw the page again, so its buttons show the finished state."""
        if not st.session_state.get(self._key("to_end")):
            return
        if not self.started and not self._begin():
            st.session_state[self._key("to_end")] = False
            return
        run, waits = self.run, list(BUSY_WAITS)
        bar = st.progress(0.0, text="running…")
        while run is not None and not run.done:
            try:
                run.step()
            except Busy as e:
                if not waits:
                    self.say(f"{e} Run to end stopped; press it again when the class is quieter.")
                    break
                pause = waits.pop(0)
                bar.progress(min(1.0, total() if total else 0.0), text=f"server busy: waiting {pause:g} s…")
                time.sleep(pause)
                continue
            except DecodeLabError as e:
                self.say(str(e))
                break
            waits = list(BUSY_WAITS)
            bar.progress(min(1.0, total() if total else 0.0), text=f"{self.latest} {self.noun}s")
        st.session_state[self._key("to_end")] = False
        self.show(self.latest)
        not_a_screen()  # a class gets the last step, drawn by the rerun, not this progress bar
        rerun_here()

    def autoplay(self, where) -> None:
        """The Autoplay switch and its speed (in a page's More)."""
        where.toggle("Autoplay", key=self._key("autoplay"),
                     persist_state="session", disabled=not self.started or self.done)
        where.slider(f"autoplay speed ({self.noun}s/s)", 0.5, 5.0, 2.0, 0.5, key=self._key("speed"),
                     persist_state="session")

    def autoplay_tick(self) -> None:
        """At the end of a page: with Autoplay on, wait, take one step and draw again."""
        if not st.session_state.get(self._key("autoplay")) or not self.started or self.done:
            return
        time.sleep(1 / st.session_state.get(self._key("speed"), 2.0))
        try:
            self.run.step()
            st.session_state[self._key("follow")] = True  # shown from the next run: the scrubber exists already
        except Busy as e:
            self.say(f"{e} Autoplay waits and tries again.")
            time.sleep(BUSY_WAITS[-1])
        except DecodeLabError as e:
            self.say(str(e))
            st.session_state[self._key("autoplay")] = False
        rerun_here()
