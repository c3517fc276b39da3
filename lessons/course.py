"""What every lesson draws from: the model on screen and the runs a lesson talks about, made once and kept.

    course = Course(lm, settings)        what a lesson is given: course.lm, course.spec, course.model (which one)
    course.greedy_run(prompt, n)         prefill, then n greedy decode steps: made once per (model, settings), kept
    course.takeaway(place, text)         the lesson's bold first line, in its own measured numbers
    course.compare(...), .batch(...)     cache on vs off, a padded batch: the same, kept
    show_stage(run, step)          a recorded step on the stage (enlarge=key: a button opens it across the screen)
    busy(traces)                   the honest note when the server's noise contradicts a lesson's numbers

Every run a lesson talks about is made once per (model, settings) and kept: a rerun, a slider moved back, another
student on the same lesson, all read the same measured run. Stored runs are only read, never stepped again.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from drawing import caveats
from drawing.palette import axis_labels
from drawing.stage_phone import stage_pictures
from engine import Sampling, Stepper, compare
from engine.generate.batch import run_batch, same_as_alone
from engine.generate.compare import KVReuse, kv_reuse
from engine.generate.loop import token_pieces
from engine.load.load import bundled_models
from engine.paths import ROOT
from lessons.next_word import next_word_odds
from physics import roofline
from physics.request import request_timeline
from physics.rungs import short_count
from physics.units import apart, human_ms
from topics.ladder.page_ladder import lesson_claim
from ui.model import device_roof
from ui.presets import PROMPTS
from ui.stage import enlarge_button

PROMPT_TITLES = [p["title"] for p in PROMPTS]
ENDING = next(p["prompt"] for p in PROMPTS if "end-of-text" in p["title"])  # a story the model ends by itself


@st.cache_resource(max_entries=48, show_spinner="Running the model once for this lesson (it is kept)…")
def _greedy_run(_lm, model: tuple, prompt: str, decode_steps: int, use_cache: bool, repeats: int | None) -> Stepper:
    run = Stepper(_lm, prompt, max_new_tokens=decode_steps + 1, stop_on_eos=False, use_cache=use_cache,
                  repeats=repeats)
    run.run()
    return run


@st.cache_resource(max_entries=16, show_spinner=False)
def _proof(_lm, model: tuple, prompt: str, decode_steps: int) -> KVReuse | None:
    run = _greedy_run(_lm, model, prompt, decode_steps, True, None)
    return kv_reuse(_lm, run.ids, run.cache)


@st.cache_resource(max_entries=8, show_spinner="Running both modes once (kept for every rerun)…")
def _compare(_lm, model: tuple, prompt: str, new_tokens: int, attempt: int) -> dict:
    """Both modes, measured in alternation; attempt 1 is the one re-measurement a flipped comparison gets."""
    return compare(_lm, prompt, new_tokens, record=False, stop_on_eos=False)


@st.cache_resource(max_entries=64, show_spinner=False)
def _sampled_prefill(_lm, model: tuple, prompt: str, sampling: Sampling):
    return Stepper(_lm, prompt, sampling=sampling, max_new_tokens=1).prefill()


@st.cache_resource(max_entries=4, show_spinner=False)
def _endings() -> dict:
    """model -> how a greedy story from ENDING stopped: filled once, with a progress bar (see lesson 6)."""
    return {}


@st.cache_resource(max_entries=16, show_spinner="Running the batch once (kept for every rerun)…")
def _batch(_lm, model: tuple, prompts: tuple[str, ...]):
    run = run_batch(_lm, list(prompts), new_tokens=9)
    return run, same_as_alone(_lm, run)


@st.cache_resource(max_entries=4, show_spinner="Timing one request, step by step, on this device (once)…")
def _request(_lm, model: tuple, prompt: str):
    return request_timeline(_lm, prompt)


@st.cache_resource(max_entries=4, show_spinner=False)
def _article_odds(_lm, model: tuple):
    return next_word_odds(_lm)


@dataclass
class Course:
    """The model on screen, and the kept runs of it that lessons read."""

    lm: object
    settings: object

    @property
    def spec(self):
        return self.lm.spec

    @property
    def model(self) -> tuple:
        """Which shared model: every kept run is keyed by it."""
        return (self.settings.source, self.settings.device, self.settings.dtype)

    @property
    def pages(self):
        """The folder of the pages' doors, for st.page_link."""
        return ROOT / "pages"

    @property
    def bundled(self) -> bool:
        """A model trained here on TinyStories (assets/models/*/README.md)."""
        return self.settings.source in {"default", *bundled_models()}

    def greedy_run(self, prompt: str, decode_steps: int, use_cache: bool = True, repeats: int | None = None) -> Stepper:
        """Prefill, then `decode_steps` greedy decode steps: the live run a lesson talks about (made once, kept).
        repeats=1 times each pass once (its stage says "one run"), for a run drawn rather than measured."""
        return _greedy_run(self.lm, self.model, prompt, decode_steps, use_cache, repeats)

    def proof(self, prompt: str, decode_steps: int) -> KVReuse | None:
        return _proof(self.lm, self.model, prompt, decode_steps)

    def compare(self, prompt: str, new_tokens: int, attempt: int) -> dict:
        return _compare(self.lm, self.model, prompt, new_tokens, attempt)

    def sampled_prefill(self, prompt: str, sampling: Sampling):
        return _sampled_prefill(self.lm, self.model, prompt, sampling)

    def batch(self, prompts: tuple[str, ...]):
        return _batch(self.lm, self.model, prompts)

    def request(self, prompt: str):
        return _request(self.lm, self.model, prompt)

    def article_odds(self):
        return _article_odds(self.lm, self.model)

    def ending(self) -> dict | None:
        return _endings().get(self.model)

    def keep_ending(self, ending: dict) -> None:
        _endings()[self.model] = ending

    def labels(self, run: Stepper) -> list[str]:
        return axis_labels(token_pieces(self.lm.tokenizer, run.ids[0].tolist()))

    @staticmethod
    def takeaway(place, text: str) -> None:
        """A lesson's opening line: its point in the numbers it measured, bold, one or two lines on a projector.
        `place` is an st.empty() made first thing, so the line leads the lesson though its numbers come later; the
        long explanation folds below it."""
        place.markdown(f"**{text}**")

    def bound_sentence(self, t, what: str) -> str:
        """Where the roofline puts this step (its intensity against this device's ridge), what its measured time shows
        (compute-, memory- or overhead-bound, or which side of the ridge, from the time against both bounds), and what
        an H100 would do with the same pass: PREDICTED, in its own dtype (bf16), never judged by times taken here."""
        here, h100 = device_roof(), roofline.h100()
        v = roofline.step_verdict(t, here)
        p = roofline.predict_step(t, self.spec, h100)
        intensity, ridge = apart(t.intensity_estimate, here.ridge)
        return (f"{what} does about **{intensity} FLOPs per byte** it moves (estimate). This device's "
                f"measured ridge is {ridge} FLOP/byte, so the roofline puts it on "
                f"**{roofline.side(t.intensity_estimate, here)}**"
                f"{roofline.cache_side(t.intensity_estimate, t.bytes_estimate, here, mark=lambda s: f'**{s}**')}. "
                "Measured, it took "
                f"{human_ms(t.forward_ms)} against a memory bound of {human_ms(v.memory_ms)} and a compute bound of "
                f"{human_ms(v.compute_ms)}: **{v.label}**. On an {roofline.short_name(h100)} at batch 1 (nothing "
                f"ran there) the same pass is {p.words()}.")

    def physics(self, phase: str, t=None) -> None:
        """The lesson's claim proven where it holds: the big rung's pass over n rows on this device (or a recording
        named as one); then, plainly, that the bundled model is too small to show it, with its own step's verdict."""
        said = lesson_claim(self.lm, phase)
        if said:
            st.markdown(said)
        if t is not None:
            st.markdown(self.too_small(t, phase))

    def step_kind(self, t) -> str:
        """What this step's measured time says on this device's roof: 'memory-bound', 'overhead-bound', ..."""
        return roofline.step_verdict(t, device_roof()).kind

    def too_small(self, t, phase: str) -> str:
        """The bundled model's own step, said plainly as too small to show the physics, with its verdict and why."""
        v = roofline.step_verdict(t, device_roof())
        said = (f"The bundled {short_count(self.spec.parameters)} model is too small to show it: measured here, its "
                f"{phase} step took {t.forward_ms:.3g} ms, **{v.label}**.")
        if v.kind == "overhead-bound":
            return said + (" Python and its many small operations, each dispatched on its own, set its time, not its "
                           "bytes or its arithmetic.")
        if v.in_cache:
            return said + (" Its weights fit the processor's cache, so what bounds it is the cache's roof, not the "
                           "memory a large model streams from.")
        return said


def prompt_picker(key: str, default: int = 0) -> str:
    title = st.selectbox("try it: the prompt", PROMPT_TITLES, index=default, key=key, persist_state="session")
    return next(p["prompt"] for p in PROMPTS if p["title"] == title)


def show_stage(run: Stepper, step: int, layer: int = 0, enlarge: str | None = None) -> None:
    """A recorded step on the stage (a phone's layout too). `enlarge`: a key for a button that opens the same
    picture across the screen, for a lesson that draws the stage in a column beside something else."""
    html = stage_pictures(run.records[step], run.pieces(), run.prompt_len, layer=layer)
    st.html(html)
    if enlarge:
        enlarge_button(html, enlarge)


def busy(traces) -> None:
    """The measured times a lesson quotes, when the server's noise contradicts it (drawing.caveats)."""
    note = caveats.latency_note(traces, "The times are as measured; the work did not change.")  # no bars here
    if note:
        st.warning(note, icon=":material/speed:")
