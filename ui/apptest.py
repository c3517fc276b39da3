"""Drive the real app.py with streamlit's AppTest.

AppTest, given a script that sits next to a `pages/` folder, also applies the
old automatic multipage rules, and after the first rerun it drops the sidebar
that app.py draws (the real server does not). So tests run app.py through a
one-line launcher that lives in a folder of its own; everything else is the
real app.

Each new AppTest also scans every installed package for Streamlit components
on its first run (0.13 s on the 2-core reference machine, and the fast tier
builds hundreds of AppTests: ~16 s of its time). A real server scans once, when
it starts; the installed packages do not change while tests run, so here too
the scan runs once a process (`_scanned_once`).

And AppTest waits for each run by polling every millisecond whether the run
has emitted its SHUTDOWN event, scanning every event the run emitted so far:
the poll takes the interpreter lock the script thread runs under (~14 % of an
AppTest-heavy module's time on that machine). Here it waits on the script
thread itself, which ends right after that event (`_wait_for_the_run`).

Both replace internals of Streamlit's: ui/streamlit_internals.py names them.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path

from streamlit.testing.v1 import AppTest

from ui import streamlit_internals

ROOT = Path(__file__).resolve().parent.parent
_LAUNCHER = Path(tempfile.mkdtemp(prefix="decode-lab-apptest-")) / "launch_app.py"
atexit.register(shutil.rmtree, _LAUNCHER.parent, ignore_errors=True)  # one folder per process, gone with it
_LAUNCHER.write_text(
    "import runpy, sys\n"
    f"sys.path.insert(0, {str(ROOT)!r})\n"
    f"runpy.run_path({str(ROOT / 'app.py')!r}, run_name='__main__')\n"
)


def _scanned_once(scan):
    """Streamlit's component scan (`scan_component_manifests`), its answer kept for the process."""
    found = cache(scan)

    def scan_once(max_workers: int | None = None):
        return list(found())  # a fresh list each time, as the scan returns

    scan_once.scans = scan  # the scan itself, for a test to check the patch is there
    return scan_once


streamlit_internals.keep_component_scan(_scanned_once)


def _wait_for_the_run(runner, timeout: float = 3) -> None:
    """Streamlit's `require_widgets_deltas`, waiting on the script thread instead of polling: the run is done when
    its thread ends (it emits SHUTDOWN as it ends); a run still going after `timeout` s is stopped and reported in
    Streamlit's own words."""
    streamlit_internals.script_thread(runner).join(timeout)
    if runner.script_stopped():
        return
    runner.request_stop()
    runner.join()
    raise RuntimeError(f"AppTest script run timed out after {timeout}(s)")


streamlit_internals.wait_for_runs_with(_wait_for_the_run)


def app_test(timeout: float = 120) -> AppTest:
    return AppTest.from_file(str(_LAUNCHER), default_timeout=timeout)


def page(name: str) -> str:
    """The path switch_page needs for pages/NAME.py."""
    return str(ROOT / "pages" / f"{name}.py")
