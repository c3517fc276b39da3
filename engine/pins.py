"""Each library internals module (engine/torch_internals.py, engine/transformers_internals.py,
ui/streamlit_internals.py) is written against one major.minor version of its library: the check they share.
No library is imported here, so a page's module can ask too."""

from __future__ import annotations


def written_for_problem(library: str, installed: str, written_for: str, path: str) -> str | None:
    """None when the `installed` version's major.minor is `written_for`, else what to check in `path`."""
    have = ".".join(installed.split("+")[0].split(".")[:2])
    if have == written_for:
        return None
    return (f"{path} was written against {library} {written_for} and {library} {installed} is installed: check "
            "each internal it names still exists and means the same, then update WRITTEN_FOR.")
