"""What a visitor sees, checked the same way by every safety test: text as rendered, markup that must be inert,
and the fixtures that open the server or cut it off from the network."""

from __future__ import annotations

import re

from streamlit.testing.v1 import AppTest

from tests.models import GOOD
from tests.test_app import click, new_tokens

# ------------------------------------------------------------------ what the user sees


def seen(body: str) -> str:
    """A markdown body as the reader sees it: backslash escapes gone."""
    return re.sub(r"\\(.)", r"\1", body)


def shown(at: AppTest) -> list[str]:
    """Every message, markdown and caption body on the page (sidebar included), as sent to the browser."""
    bodies = []
    for kind in ("error", "warning", "info", "success", "markdown", "caption"):
        bodies += [str(e.value) for e in at.get(kind)]
    return bodies


def messages(at: AppTest) -> list[str]:
    """The error and warning boxes, as the reader sees them."""
    return [seen(str(e.value)) for e in list(at.get("error")) + list(at.get("warning"))]


_LIVE = re.compile(r"(?<!\\)(?:!?\[[^\]]*(?<!\\)\]\(|<img|<a\s|:red\[|:blue\[)")


def inert(body: str) -> bool:
    """Would a markdown body show a link, an image, HTML or a colour directive made from user text?

    Plain markdown (st.error, st.markdown): every '[', '](', '<', ':' from the user must be
    backslash-escaped. A body that is one raw HTML block (unsafe_allow_html) is not parsed as markdown
    as long as it holds no blank line (CommonMark ends an HTML block there); inside it, user text must be
    HTML-escaped, so '<img' may not appear raw.
    """
    if body.lstrip().startswith("<") and "\n\n" not in body:
        return inert_html(body)
    return not _LIVE.search(body)


def inert_html(body: str) -> bool:
    """An st.html body (never parsed as markdown): no tag made from user text. The stage's own <img> of
    its SVG is the app's, and carries the SVG base64-encoded (its text escaped by drawing/stage.py)."""
    return not re.search(r"<img(?! alt=)|<a\s", body)


def prefill_works(at: AppTest) -> None:
    """The server keeps working: a good prompt prefills and decodes after whatever went before."""
    at.text_input(key="step_prompt").set_value(GOOD).run()
    if at.button(key="step_btn_reset").disabled is False:
        click(at, "step_btn_reset")
    click(at, "step_btn_prefill")
    click(at, "step_btn_next")
    assert new_tokens(at) == 2
