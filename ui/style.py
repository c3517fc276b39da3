"""How every page looks: compact on a projector, larger in presenter mode, folded on a phone.

The CSS is placed once per run by the frame (`apply_style`); charts read `scale()` so presenter mode enlarges
their text too, not only the page's prose.
"""

from __future__ import annotations

import streamlit as st

# Compact everywhere: the control bar, the stage and a view fit a 1280x720 projector.
COMPACT_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 2.4rem; padding-bottom: 1rem; max-width: 100%;
  padding-left: 1.5rem; padding-right: 1.5rem; }
[data-testid="stHeader"] { height: 2.2rem; min-height: 2.2rem; }
[data-testid="stVerticalBlock"] { gap: 0.55rem; }
/* a figure in a third of a column beside the sidebar ("7.36 ms" at 1280 px): a little smaller, never cut to "7.36 …" */
[data-testid="stMetricValue"], [data-testid="stMetricValue"] * { font-size: clamp(1.5rem, 2.2vw, 2.25rem); }
h1 { font-size: 2rem !important; padding: 0.1rem 0 0.2rem 0 !important; }   /* a page's title tops its sections */
[data-testid="stMain"] h2 { font-size: 1.55rem !important; padding: 0.5rem 0 0.1rem 0 !important; }
[data-testid="stMain"] h3 { font-size: 1.25rem !important; }
[data-testid="stTable"] td, [data-testid="stTable"] th { white-space: normal !important; overflow-wrap: anywhere; }
[data-testid="stCaptionContainer"] { opacity: 1; color: #4d4d4d; }  /* Streamlit draws a caption at 60 % opacity,
                                                                    which fades on a projector: grey, but read */
.st-key-step_prompt { flex: 1 1 8rem !important; width: auto !important; max-width: 250px; }  /* the control bar
                                    stays one row (step/page.py): the prompt box gives up width before the row wraps */
[data-testid="stSidebar"][data-collapsed="false"] [data-testid="stPageLink-NavLink"] :is(span, p),
[data-testid="stMain"] [data-testid="stPageLink-NavLink"] :is(span, p) {  /* a page's name wraps in the open
  sidebar and in a lesson's link to its page (a phone's), never cut (a folded sidebar has no width to wrap in) */
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important; }
.dl-stage { overflow-x: auto; }
.dl-stage img { display: block; width: 100%; height: auto; }
.st-key-scale_ladder_row { margin-top: 1rem; }  /* the header's descenders above it stay whole (a phone's too) */
.st-key-step_warm { height: 0; overflow: hidden; margin-top: -0.55rem; }  /* a chart drawn out of sight: see step_through */
.st-key-dl_keys_back { display: none; }      /* a script with nothing to show: see keys_back */
.dl-stage-head { display: none; }            /* the stage's first line again, in words: a phone's only (below) */
.dl-stage img.dl-stage-phone { display: none; }  /* the stage laid out for a phone: a phone's only (below) */
.dl-picture img.dl-picture-phone { display: none !important; }  /* a picture's phone layout: a phone's only */
.dl-lane-name { display: none; }             /* a race text's run, said where the columns stack (below 640 px) */
@media (max-width: 640px) { .dl-lane-name { display: block; } }  /* Streamlit's columns stack under 640 px */
@media (max-width: 700px) {                  /* a phone: the bar folds into two short rows, views stack */
  .dl-stage img, .dl-stage > svg { min-width: 520px; direction: ltr; }  /* it scrolls sideways; text stays legible */
  .dl-stage {                                  /* ...and opens at its right end, the step's point: the new K/V column */
    direction: rtl;                            /* and the next token; a shadow at its left edge says there is more */
    background: linear-gradient(to right, #fff 40%, rgba(255,255,255,0)) left / 28px 100% no-repeat local,
      radial-gradient(farthest-side at 0% 50%, rgba(0,0,0,.22), rgba(0,0,0,0)) left / 12px 100% no-repeat scroll;
  }
  .dl-stage-head { display: block !important; font-weight: 700; font-size: 0.95rem; }  /* its first line, whole */
  .dl-stage.dl-stage-fits { direction: ltr; background: none; overflow-x: visible; }  /* a picture with a phone
            layout (drawing/stage_phone.py, a serving picture's) shows it whole: title, layers, newest column */
  .dl-stage.dl-stage-fits img { min-width: 0; }
  .dl-stage.dl-stage-fits img.dl-stage-wide { display: none; }
  .dl-stage.dl-stage-fits img.dl-stage-phone { display: block; }
  .modebar-container, [data-testid="stElementToolbar"] { display: none !important; }  /* never over a chart's title */
  .stElementContainer[class*="_enlarge"] { display: none; }  /* Enlarge the stage: a phone has its own layout,
                                                  which the dialog showed smaller than the page (310 px, not 371) */
  .katex-display { font-size: 0.82em; }        /* a formula fits the width instead of running off it, its
                                                  subscripts still 11 px (a longer one scrolls: KaTeX's own) */
  .katex-display:not(:has(.msupsub)) { font-size: 0.76em; }  /* none: its smallest text is its own, 15 px */
  .dl-picture { overflow-x: auto; }            /* a lesson's picture (lookahead, one request) scrolls sideways... */
  .dl-picture img { min-width: 640px; }        /* ...with its text legible, like the stage, and says so above it */
  .dl-picture::before { content: "⟷ swipe sideways: the picture is wider than the screen"; display: block;
    position: sticky; left: 0; font-size: 0.75rem; color: #555; }
  .dl-picture.dl-picture-fits { overflow-x: visible; }  /* a picture with a phone layout shows it whole... */
  .dl-picture.dl-picture-fits::before { content: none; }
  .dl-picture.dl-picture-fits img { min-width: 0; }
  .dl-picture.dl-picture-fits img.dl-picture-wide { display: none !important; }
  .dl-picture.dl-picture-fits img.dl-picture-phone { display: block !important; }  /* ...instead of the wide one */
  .dl-text { display: none; }                  /* the stage's token strip already shows the text */
  [data-testid="stMainBlockContainer"] { padding-left: 0.6rem; padding-right: 0.6rem; padding-top: 2.2rem; }
  button kbd { display: none !important; }     /* keyboard hints: a phone has no keyboard */
  button[data-testid^="stBaseButton"] { padding: 0.2rem 0.55rem !important; min-height: 2.1rem !important; }
  [data-testid="stVerticalBlock"] { gap: 0.35rem; }
}
</style>"""
# Presenter mode: larger text for the back row of a classroom; charts scale with PRESENTER_SCALE. It starts on a line
# of its own, so markdown reads it as one raw <style> block after COMPACT_CSS's, never as text with emphasis in it.
PRESENTER_CSS = """
<style>
html { font-size: 18px; }
/* a run's control buttons carry their key on their face (kbd): in front of a class their help would only cover the
   row under them (the layer and More), so it is not shown; no tooltip ever takes a click meant for what it covers */
body:has([class*="st-key-"][class*="_btn_"]:hover) [role="tooltip"] { display: none !important; }
[role="tooltip"], [role="tooltip"] * { pointer-events: none !important; }
[data-testid="stMarkdownContainer"] p, [data-testid="stCaptionContainer"] { font-size: 1.05rem; }
[data-testid="stCaptionContainer"] { color: #333; }  /* read from the back row */
[data-testid="stMetricValue"], [data-testid="stMetricValue"] * { font-size: 2.35rem !important; line-height: 1.2; }
</style>"""
PRESENTER_SCALE = 1.35


def presenting() -> bool:
    return bool(st.session_state.get("side_presenter"))


def scale() -> float:
    """How much larger charts are drawn: 1, or PRESENTER_SCALE in presenter mode."""
    return PRESENTER_SCALE if presenting() else 1.0


def apply_style() -> None:
    """The page's CSS for this run: compact always, larger text in presenter mode."""
    st.markdown(COMPACT_CSS + (PRESENTER_CSS if presenting() else ""), unsafe_allow_html=True)


def picked() -> None:
    """on_change of a box on a page with keyboard shortcuts (a scenario picker): the page gives the keys back."""
    st.session_state["dl_keys_back"] = st.session_state.get("dl_keys_back", 0) + 1
    st.session_state["dl_keys_back_now"] = True


def keys_back() -> None:
    """After a pick (`picked`), move the focus out of the box, so the next key is a shortcut (→ steps, E runs to
    end) and not typed into the box to search its list. A box keeps the focus after a pick; the script runs once
    per pick (its counter makes it new, and only new HTML runs again)."""
    if not st.session_state.pop("dl_keys_back_now", False):
        return
    n = st.session_state.get("dl_keys_back", 0)
    with st.container(key="dl_keys_back"):  # hidden (COMPACT_CSS): nothing to see
        st.html(f"<script>/* pick {n} */ const a = document.activeElement; if (a && a !== document.body) a.blur();"
                "</script>", unsafe_allow_javascript=True)
