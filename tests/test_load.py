"""A small classroom (5 sessions x 15 s) on one server: no errors, nobody sees anybody else's text."""

import pytest


@pytest.fixture
def load_report(chromium, monkeypatch):
    """tests/load.py's report: its own `streamlit run app.py` and 5 sessions in the system Chromium for 15 s."""
    import tests.load

    monkeypatch.setattr(tests.load, "CHROMIUM", chromium)  # the one the chromium fixture found
    return tests.load.run(contexts=5, seconds=15)


def test_five_sessions_at_once_stay_correct_and_separate(load_report):
    rep = load_report
    assert rep["errors"] == []
    assert rep["cross_session_leaks"] == []
    assert rep["server_alive"]
    assert rep["sessions_that_stepped"] == 5 and rep["steps"] >= 5
