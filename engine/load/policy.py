"""Which models a browser may load: an allow-list, safe by default.

`streamlit run app.py` listens on the network, so whoever reaches the page is a
classroom, not only the person who started it. A browser (the sidebar, a shared
link, the Scale page's config box) can therefore choose only:

- the bundled models, and
- the models the person who started the server named:
      streamlit run app.py -- --model Qwen/Qwen2.5-0.5B --model /data/my-model
  or  DECODE_LAB_MODELS="Qwen/Qwen2.5-0.5B,/data/my-model" streamlit run app.py

Typing any Hugging Face id or folder into the browser is an explicit opt-in for a
machine with one user:  streamlit run app.py -- --open-models  (or DECODE_LAB_OPEN_MODELS=1).

A name that is not offered gets one message, the same whether it is a folder that
exists, one that does not, or a hub id: nothing is looked up, so nothing is revealed.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from engine.errors import ModelNotOffered
from engine.load.load import bundled_models

MAX_NAME = 300


@dataclass(frozen=True)
class ModelPolicy:
    offered: tuple[str, ...]  # bundled models first, then those the server named, in menu order
    open: bool  # any hub id or local folder may be typed (a single-user machine)

    def allows(self, source: str) -> bool:
        return isinstance(source, str) and (source in self.offered or (self.open and 0 < len(source.strip()) <= MAX_NAME))

    def check(self, source: str) -> str:
        """The source, if a browser may load it; else ModelNotOffered with a message that reveals nothing."""
        if self.allows(source):
            return source.strip()
        raise ModelNotOffered("That model is not offered by this server: choose one from the model list. "
                              "(A teacher adds models when starting the server: see the README, 'Serving a class'.)")


def from_settings(argv: list[str] | None = None, environ: dict | None = None) -> ModelPolicy:
    """The policy the server was started with: `-- --model X --open-models` or DECODE_LAB_MODELS / _OPEN_MODELS."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--open-models", action="store_true")
    args, _ = parser.parse_known_args(argv or [])
    named = [m.strip() for m in args.model + env.get("DECODE_LAB_MODELS", "").split(",") if m.strip()]
    offered = list(dict.fromkeys(bundled_models() + named))
    open_models = (args.open_models or env.get("DECODE_LAB_OPEN_MODELS") == "1") \
        and env.get("DECODE_LAB_BUNDLED_ONLY") != "1"
    return ModelPolicy(offered=tuple(offered), open=open_models)
