"""Where the project's own files are: the bundled models, tables and presets in assets/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
MODELS_DIR = ASSETS / "models"
