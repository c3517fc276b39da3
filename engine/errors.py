"""Typed errors whose message is written for the person using the app.

Every error here is safe to show as-is in the UI: it says what went wrong and
what to do, and never carries a traceback.
"""


class DecodeLabError(Exception):
    """Base class: something the user can fix."""


class ModelLoadError(DecodeLabError):
    """The model could not be loaded (see subclasses for why)."""


class ModelNotOffered(ModelLoadError):
    """A browser asked for a model the server does not offer (see engine/load/policy.py)."""


class ModelNotFound(ModelLoadError):
    """Unknown id, or no network and not in the local cache."""


class NotACausalLM(ModelLoadError):
    """A folder or repository that holds no decoder-only causal language model."""


class UnsafeWeights(ModelLoadError):
    """Weights only in pickle format (.bin/.pt): refused, never unpickled."""


class RemoteCodeRequired(ModelLoadError):
    """The model needs code from its repository to run: refused (trust_remote_code is never set)."""


class NoTokenizer(ModelLoadError):
    """The model has no tokenizer the app can load."""


class TooLarge(ModelLoadError):
    """The weights would not fit in the memory available: refused before loading."""


class StepError(DecodeLabError):
    """A prompt, a setting or a step that cannot be run (empty prompt, too long, finished run...)."""


class Busy(StepError):
    """Too many steps are queued for the shared model: try again in a moment."""
