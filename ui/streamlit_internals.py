"""Every use of Streamlit that is not its public API, in one place, each named with what it is for.

streamlit is pinned (requirements.txt); `WRITTEN_FOR` is the version this file was written against, and
tests/test_internals.py fails with a clear message when another one is installed, so an upgrade starts here.
Its public API (`st.*`, `streamlit.errors`, `streamlit.testing.v1.AppTest`) is called where it is needed. What is
not public:

  a class's copy of the lecturer's page (classroom/page_copy.py)
    runtime.scriptrunner_utils.script_run_context.get_script_run_ctx
                                  the running script's context (`script_context`): its `enqueue` carries every
                                  message the run sends (replaced for one run, to keep what the page draws), its
                                  `session_state._state` reads a widget's value without a yield point
                                  (`widget_state`), and its `_new_widget_state.widget_metadata[id].serializer`
                                  turns a value into what the widget shows (`widget_shown`: its format_func's)
    runtime.scriptrunner_utils.exceptions.StopException, RerunException
                                  what st.stop() and st.rerun() raise, and a run stopped at a yield point
                                  (`RUN_ENDINGS`): a copy of a page lets them through
    the ForwardMsg protocol       `metadata.delta_path`, `delta.new_element` / `add_block`: where a message
                                  draws and what
    dataframe_util.convert_arrow_bytes_to_pandas_df
                                  a drawn table's Arrow bytes back into pandas (`arrow_table`)
  AppTest, run as fast as a page runs (ui/apptest.py)
    components.v2.manifest_scanner.scan_component_manifests
                                  the scan of every installed package for components, which AppTest repeats on
                                  each run (a server scans once): replaced by one kept for the process
                                  (`keep_component_scan`)
    testing.v1.local_script_runner.require_widgets_deltas
                                  how AppTest waits for a run (polling every millisecond): replaced by a wait on
                                  the script's thread (`wait_for_runs_with`, `script_thread`)
    LocalScriptRunner._script_thread, script_stopped(), request_stop(), join()
                                  the run's thread, whether it ended, and how to stop it
"""

from __future__ import annotations

import threading

import streamlit
from streamlit.components.v2 import manifest_scanner
from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df
from streamlit.runtime.scriptrunner_utils.exceptions import RerunException, StopException
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
from streamlit.testing.v1 import local_script_runner

from engine.pins import written_for_problem

WRITTEN_FOR = "1.67"  # streamlit's major.minor
RUN_ENDINGS = (StopException, RerunException)  # st.stop(), st.rerun(), and a run stopped at a yield point


def version_problem() -> str | None:
    """None when the installed streamlit is the one this file was written against, else what to check."""
    return written_for_problem("streamlit", streamlit.__version__, WRITTEN_FOR, "ui/streamlit_internals.py")


def script_context():
    """The running script's context, or None outside a script run."""
    return get_script_run_ctx()


def widget_state(ctx) -> dict:
    """Every widget's value by its id or key, read without a yield point (the page may have stopped)."""
    return ctx.session_state._state


def widget_shown(ctx, widget_id: str, value):
    """A widget's value as the page shows it (a picker's format_func applied: 'ms per token', not 'per_token'), or
    the value itself where Streamlit keeps no serializer for that widget."""
    meta = ctx.session_state._state._new_widget_state.widget_metadata.get(widget_id)
    try:
        return value if meta is None else meta.serializer(value)
    except Exception:  # noqa: BLE001 - a value its serializer refuses: shown as it is
        return value


def arrow_table(data: bytes):
    """A drawn table's Arrow bytes as a pandas DataFrame."""
    return convert_arrow_bytes_to_pandas_df(data)


def keep_component_scan(scan_once) -> None:
    """Put `scan_once(scan)` in place of Streamlit's component scan, once a process (it marks itself `scans`)."""
    if not hasattr(manifest_scanner.scan_component_manifests, "scans"):
        manifest_scanner.scan_component_manifests = scan_once(manifest_scanner.scan_component_manifests)


def wait_for_runs_with(wait) -> None:
    """AppTest waits for each run with `wait(runner, timeout)` instead of its own polling."""
    local_script_runner.require_widgets_deltas = wait


def script_thread(runner) -> threading.Thread:
    """The thread an AppTest run executes on: the run is done when it ends."""
    return runner._script_thread
