"""A small classroom (5 sessions x 15 s) on one server: no errors, nobody sees anybody else's text."""

from tests.load import run
from tests.test_browser import need_chromium


def test_five_sessions_at_once_stay_correct_and_separate():
    need_chromium()
    rep = run(contexts=5, seconds=15)
    assert rep["errors"] == []
    assert rep["cross_session_leaks"] == []
    assert rep["server_alive"]
    assert rep["sessions_that_stepped"] == 5 and rep["steps"] >= 5
