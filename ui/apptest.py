"""Drive the real app.py with streamlit's AppTest.

AppTest, given a script that sits next to a `pages/` folder, also applies the
old automatic multipage rules, and after the first rerun it drops the sidebar
that app.py draws (the real server does not). So tests run app.py through a
one-line launcher that lives in a folder of its own; everything else is the
real app.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
_LAUNCHER = Path(tempfile.mkdtemp(prefix="decode-lab-apptest-")) / "launch_app.py"
atexit.register(shutil.rmtree, _LAUNCHER.parent, ignore_errors=True)  # one folder per process, gone with it
_LAUNCHER.write_text(
    "import runpy, sys\n"
    f"sys.path.insert(0, {str(ROOT)!r})\n"
    f"runpy.run_path({str(ROOT / 'app.py')!r}, run_name='__main__')\n"
)


def app_test(timeout: float = 120) -> AppTest:
    return AppTest.from_file(str(_LAUNCHER), default_timeout=timeout)


def page(name: str) -> str:
    """The path switch_page needs for pages/NAME.py."""
    return str(ROOT / "pages" / f"{name}.py")
