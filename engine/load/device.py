"""The device helpers, under the name the pages and measurements import them by.

They live in engine/device.py, below every layer, because forward/ needs `sync` and forward must not
import load/ (load imports forward: see engine/__init__.py for the order).
"""

from engine.device import (  # noqa: F401
    DTYPES,
    SMALL_MODEL_PARAMS,
    available_bytes,
    describe,
    pick_device,
    pick_dtype,
    release_memory,
    serving_threads,
    sync,
    use_serving_threads,
)
