"""Busy means wait, visibly: a full queue gets a polite message, Run to end and Autoplay back off."""

from __future__ import annotations

import threading
import time

import pytest

from engine import Stepper
from engine.errors import Busy
from engine.timing import now
from tests.models import GOOD
from tests.safety import messages
from tests.test_app import click, fresh_app, new_tokens

# ------------------------------------------------------------------ busy means wait, visibly


@pytest.fixture
def busy_model(monkeypatch):
    """Every forward pass answers Busy (no free slot); counts the tries and the waits between them."""
    tries, waits = [], []
    real_sleep = time.sleep

    class Full(threading.Semaphore):
        def acquire(self, *args, **kwargs):
            tries.append(now())
            return super().acquire(*args, **kwargs)

    def sleep(seconds):
        if seconds >= 0.5:  # a back-off wait: recorded, and made short so the test is quick
            waits.append(seconds)
            return real_sleep(0.01)
        return real_sleep(seconds)

    def fill(lm):
        monkeypatch.setattr(lm, "slots", Full(0))
        monkeypatch.setattr(time, "sleep", sleep)

    return fill, tries, waits


@pytest.mark.slow
def test_run_to_end_waits_longer_each_time_the_server_is_busy_then_says_so(busy_model):
    fill, tries, waits = busy_model
    at = click(fresh_app(), "step_btn_prefill")
    fill(at.session_state["lm"])
    at.button(key="step_btn_run").click().run()
    assert not at.exception
    said = " ".join(messages(at))
    assert "busy" in said and "Run to end stopped" in said
    assert waits == sorted(waits) and len(waits) == len(tries) - 1 <= 8  # bounded, and a wait between tries
    assert sum(waits) >= 10  # it really backed off (seconds it would have waited, made short here)
    assert new_tokens(at) == 1  # nothing was lost or invented


@pytest.mark.slow
def test_autoplay_waits_when_the_server_is_busy_and_says_so(busy_model, monkeypatch):
    import step.page  # the step page shows what its controller says with its own `error` (ui.text's)

    fill, tries, waits = busy_model
    said = []
    real_error = step.page.error
    monkeypatch.setattr(step.page, "error", lambda text, where=None: said.append(text) or real_error(text))
    at = fresh_app()
    at.sidebar.number_input(key="side_max_new").set_value(3).run()
    click(at, "step_btn_prefill")
    lm = at.session_state["lm"]
    fill(lm)
    real_acquire = type(lm.slots).acquire

    def freed_after_two_waits(self, *args, **kwargs):
        if len(waits) >= 2:
            lm.slots = threading.Semaphore(64)  # the class went quiet
            return lm.slots.acquire(*args, **kwargs)
        return real_acquire(self, *args, **kwargs)

    monkeypatch.setattr(type(lm.slots), "acquire", freed_after_two_waits)
    at.session_state["step_speed"] = 5.0  # paced at 0.2 s a token: only busy answers make waits of 0.5 s or more
    at.session_state["step_autoplay"] = True
    at.run(timeout=60)
    assert not at.exception
    assert len(waits) == 2 and all(w >= 1 for w in waits)  # a real pause after each busy answer, no spinning
    assert any("busy" in s and "Autoplay waits" in s for s in said)
    assert new_tokens(at) == 3  # and then it went on to the end


def test_a_full_queue_gets_a_polite_busy_message(bundled_lm, monkeypatch):
    monkeypatch.setattr(bundled_lm, "slots", threading.Semaphore(0))
    s = Stepper(bundled_lm, GOOD)
    with pytest.raises(Busy, match="busy"):
        s.prefill()


@pytest.mark.slow
def test_forward_passes_from_many_threads_match_a_lone_run(bundled_lm):
    """The shared model is used by many sessions at once; each run must equal the same run alone."""
    alone = Stepper(bundled_lm, GOOD, max_new_tokens=12, stop_on_eos=False)
    alone.run()
    results, errors_seen = [], []

    def worker():
        try:
            s = Stepper(bundled_lm, GOOD, max_new_tokens=12, stop_on_eos=False)
            s.run()
            results.append(s.generated_ids)
        except Exception as e:  # noqa: BLE001
            errors_seen.append(e)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors_seen and results == [alone.generated_ids] * 6
