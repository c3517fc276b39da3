"""The bundled presets: prompts, step-through scenarios, and small models worth trying (assets/*.json)."""

from __future__ import annotations

import json

from engine.paths import ASSETS

PROMPTS = json.loads((ASSETS / "prompts.json").read_text())
SCENARIOS = json.loads((ASSETS / "scenarios.json").read_text())  # ready-made runs: a title, a why, a link
SMALL_MODELS = json.loads((ASSETS / "small_models.json").read_text())  # well-known models to load when allowed
