"""Load a causal LM safely and describe it for display.

Safe means, in this order, before any weight is read:
1. the folder's files are regular files of sane size (no pipe, device or 1 GB config.json);
2. the config is read without remote code, and its figures are checked: positive whole numbers in
   sane ranges, at most MAX_LAYERS layers in the model and in every sub-model it names (a vision
   tower of 20,000 layers is as slow to build as a decoder of 20,000);
3. the parameter count is bounded analytically from those figures and checked against free
   memory (no module tree is built for a config that cannot fit);
4. the weights are exactly the safetensors files transformers will read (model.safetensors, or the
   files its index names, or the file the config's `transformers_weights` names), each with a header
   that parses and that together hold the parameters the config describes; anything that would make
   transformers read another kind of file (an index naming a pickle `.bin`, an adapter pointing at
   another model) is refused;
5. transformers loads with `use_safetensors=True` and `trust_remote_code=False`, and every weight the
   model needs must come from those files (none left randomly initialised).
Every failure is a DecodeLabError whose message names the model as it was asked for,
never a path of the server.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from engine import device as dev
from engine.errors import (
    DecodeLabError,
    ModelLoadError,
    ModelNotFound,
    NotACausalLM,
    NoTokenizer,
    RemoteCodeRequired,
    UnsafeWeights,
)
from engine.forward import capture
from engine.forward.spec import from_config
from engine.load.checks import (
    WEIGHT_SHARE,
    check_causal_lm,
    check_config,
    check_folder,
    check_memory,
    hub_reachable,
    stored_numbers,
    weight_files,
)
from engine.load.loaded import LoadedModel
from engine.paths import MODELS_DIR

DEFAULT_MODEL = "tinystories-llama"
DRAFT_MODEL = "tinystories-draft"


def bundled_models() -> list[str]:
    """Names of the models shipped in assets/models/, default first."""
    if not MODELS_DIR.is_dir():
        return []
    names = sorted(p.name for p in MODELS_DIR.iterdir() if (p / "config.json").is_file())
    return sorted(names, key=lambda n: n != DEFAULT_MODEL)


def is_bundled(source: str) -> bool:
    """Is `source` one of the models shipped in assets/models/ ('default' included)?"""
    source = (source or "").strip()
    return (MODELS_DIR / (DEFAULT_MODEL if source == "default" else source) / "config.json").is_file()


def model_dtype(source: str, device: torch.device, requested: str | torch.dtype | None = None) -> torch.dtype:
    """The dtype a model loads in: `requested` if given; a bundled model in float32 on every device (a few MB:
    the lesson is exactness, and a cache-off race in bf16 can flip a near-tie between two tokens); any other
    model in the device's fast dtype (engine.device.pick_dtype: bf16 on a GPU, fp32 on a CPU)."""
    if requested is None or requested == "auto":
        if is_bundled(source):
            return torch.float32
    return dev.pick_dtype(device, requested)


def resolve_source(source: str) -> str:
    """"default" or a bundled name -> its folder; anything else is a local folder or a hub id."""
    source = (source or "").strip()
    if not source:
        raise ModelNotFound("No model given: choose a bundled model or type a Hugging Face id or a folder.")
    if source == "default":
        source = DEFAULT_MODEL
    if (MODELS_DIR / source / "config.json").is_file():
        return str(MODELS_DIR / source)
    return source


def read_config(source: str):
    """The model's config, read without weights and without remote code, its figures checked."""
    from transformers import AutoConfig

    path = resolve_source(source)
    local = Path(path)
    if local.exists():
        check_folder(local, source)
    try:
        try:
            config = AutoConfig.from_pretrained(path, trust_remote_code=False, local_files_only=True)
        except OSError:
            if local.exists() or not hub_reachable():
                raise
            config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    except ValueError as e:
        if "trust_remote_code" in str(e) or "custom code" in str(e):
            raise RemoteCodeRequired(
                f"'{source}' needs code from its repository to run. Decode Lab never runs downloaded code "
                "(trust_remote_code is off): choose a model that transformers supports natively."
            ) from None
        raise NotACausalLM(f"'{source}' has a config transformers does not recognise.") from None
    except OSError:
        if local.exists():  # a folder whose config.json is not JSON (transformers says so with an OSError)
            raise NotACausalLM(f"'{source}' has a config.json that cannot be read (malformed or of the wrong "
                               "types).") from None
        offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("DECODE_LAB_OFFLINE") == "1"
        why = "the hub is switched off here" if offline else "no network, or no such repository"
        raise ModelNotFound(
            f"Could not find '{source}': it is not a bundled model or a local folder, and it is not in the "
            f"Hugging Face cache ({why}). Check the spelling, or download it once while online."
        ) from None
    except Exception:  # noqa: BLE001 - a malformed config.json (bad JSON, wrong types) is the user's input
        raise NotACausalLM(f"'{source}' has a config.json that cannot be read (malformed or of the wrong types).") from None
    check_config(config, source)
    return config


def load_model(source: str = "default", device: str | None = None, dtype: str | torch.dtype | None = None,
               warmup: bool = True) -> LoadedModel:
    """Load a causal LM for stepping: bundled name, "default", hub id or local folder.

    Raises a ModelLoadError subclass with a message fit for the UI, and nothing else: a failure no
    check foresaw (figures that contradict each other, out of memory on the device) becomes one too.
    """
    try:
        return _checked_load(source, device, dtype, warmup)
    except DecodeLabError:
        raise
    except Exception:  # noqa: BLE001 - the message names the model, never the server's paths or code
        raise ModelLoadError(f"Could not load '{source}': it does not run here (a broken or unusual model).") from None


def _checked_load(source: str, device, dtype, warmup: bool) -> LoadedModel:
    """Every check in the module docstring's order, then the build."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        torch_device = dev.pick_device(device)
        torch_dtype = model_dtype(source, torch_device, dtype)
    except ValueError as e:
        raise ModelLoadError(str(e)) from None
    except RuntimeError:  # torch's "Expected one of cpu, cuda, ..." for a device name it does not know
        raise ModelLoadError(f"Unknown device {str(device)[:40]!r}: choose cpu, cuda or mps.") from None
    path = resolve_source(source)
    config = read_config(source)
    check_causal_lm(config, source)
    params = check_memory(config, source, torch_device, torch_dtype)
    files = weight_files(path, source, config)
    if files is not None:
        stored = stored_numbers(files, source)
        if stored < WEIGHT_SHARE * params:
            raise ModelLoadError(f"'{source}' has weights for {stored:,} numbers but its config describes {params:,} "
                                 "parameters: the weights do not belong to this config.")
    return _build(path, source, config, params, torch_device, torch_dtype, warmup)


def _build(path: str, source: str, config, params: int, torch_device, torch_dtype, warmup: bool) -> LoadedModel:
    """Tokenizer, weights, device and warm-up, once every check has passed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.timing import now

    started = now()

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except Exception:  # noqa: BLE001 - any tokenizer failure means "no usable tokenizer"
        tokenizer = None
    if tokenizer is None or not tokenizer("Hello", add_special_tokens=False)["input_ids"]:
        # transformers may build an empty tokenizer from a config alone: it encodes nothing
        raise NoTokenizer(f"'{source}' has no tokenizer files (tokenizer.json or vocab files) Decode Lab can load.")

    captures = capture.supports(config)
    if captures:
        capture.register()
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch_dtype, attn_implementation=capture.IMPLEMENTATION if captures else "eager",
            use_safetensors=True, trust_remote_code=False, output_loading_info=True,
        )
    except OSError as e:
        if ".bin" in str(e) or "safetensors" in str(e):
            raise UnsafeWeights(f"'{source}' offers no safetensors weights; Decode Lab does not unpickle .bin files.") from None
        raise ModelNotFound(f"Could not load the weights of '{source}'.") from None
    except Exception:  # noqa: BLE001 - weights that do not match their config, a truncated file, ...
        raise ModelLoadError(f"Could not load '{source}': its weights do not match its config or are damaged.") from None
    if info.get("missing_keys") or info.get("mismatched_keys"):
        missing = len(info.get("missing_keys") or ()) + len(info.get("mismatched_keys") or ())
        del model
        raise ModelLoadError(f"Could not load '{source}': {missing} of the weights its config needs are not in its "
                             "weights files (they would be random numbers).")
    model.to(torch_device).eval()

    lm = LoadedModel(model=model, tokenizer=tokenizer, spec=from_config(model.config, source, params, "its config"),
                     device=torch_device, dtype=torch_dtype, captures=captures)
    lm.load_ms = (now() - started) * 1e3  # before the warm-up, which is reported apart
    if warmup:
        from engine.forward.run import warm_up

        lm.warmup_ms = warm_up(lm)
    return lm
