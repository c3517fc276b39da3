"""Load a causal LM safely and describe it for display.

Safe means, in this order, before any weight is read:
1. the config is read without remote code, and its figures are checked (positive whole
   numbers in sane ranges, at most MAX_LAYERS layers);
2. the parameter count is bounded analytically from those figures and checked against free
   memory (no module tree is built for a config that cannot fit);
3. the weights are safetensors files inside the model's folder, each with a header that
   parses; an index that points anywhere else (a pickle `.bin`, another folder) is refused;
4. transformers loads with `use_safetensors=True` and `trust_remote_code=False`.
Every failure is a DecodeLabError whose message names the model as it was asked for,
never a path of the server.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import torch

from engine import capture
from engine import device as dev
from engine.errors import (
    Busy,
    ModelLoadError,
    ModelNotFound,
    NoTokenizer,
    NotACausalLM,
    RemoteCodeRequired,
    TooLarge,
    UnsafeWeights,
)
from engine.spec import ModelSpec, from_config

MODELS_DIR = Path(__file__).resolve().parent.parent / "assets" / "models"
DEFAULT_MODEL = "tinystories-llama"
DRAFT_MODEL = "tinystories-draft"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
MEMORY_HEADROOM = 1.3  # weights x this must fit: activations, cache and the copy made while loading
MAX_LAYERS = 256  # the deepest published decoder has 126; a config with more is refused unread
MAX_WIDTH = 65_536  # hidden size, intermediate size, head_dim
MAX_HEADS = 1_024
MAX_VOCAB = 2_000_000
MAX_POSITIONS = 10_000_000
MAX_WAITING = 64  # forward passes queued for the model at once; more get a polite "busy"
MAX_WAIT_S = 30.0  # how long one forward pass may wait for its turn


@dataclass
class LoadedModel:
    """A model, its tokenizer and a lock: shared read-only by every session.

    Forward passes take `lock` (through `turn()`), so two sessions never run the
    shared model at once: on a CPU they would only fight for the same cores, and
    timings would lie. Each session keeps its own cache and traces (see Stepper).
    """

    model: torch.nn.Module
    tokenizer: object
    spec: ModelSpec
    device: torch.device
    dtype: torch.dtype
    captures: bool  # Q/K/V are read off the real tensors (engine.capture); else derived from the config
    warmup_ms: float = 0.0  # time of the warm-up passes made at load, reported apart from every step
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    slots: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(MAX_WAITING), repr=False)

    @property
    def config(self):
        return self.model.config

    @property
    def dtype_name(self) -> str:
        return _dtype_name(self.dtype)

    @property
    def elem_bytes(self) -> int:
        return torch.finfo(self.dtype).bits // 8

    def rows(self) -> list[tuple[str, str]]:
        """The model at a glance, in the words the code and the traces use."""
        s = self.spec
        return [
            ("name", s.name), ("architecture", s.architecture), ("layer", str(s.layers)),
            ("head (query heads)", str(s.heads)), ("kv_head (key/value heads)", f"{s.kv_heads} ({s.attention})"),
            ("head_dim", str(s.head_dim)), ("d_model", str(s.d_model)), ("vocab", f"{s.vocab:,}"),
            ("attention per layer", s.layer_pattern()), ("max positions", f"{s.max_positions:,}"),
            ("parameters", f"{int(s.parameters):,}"), ("dtype", self.dtype_name), ("device", str(self.device)),
            ("Q/K/V shapes", "measured on the real tensors" if self.captures else "derived from the config"),
        ]

    @contextmanager
    def turn(self):
        """Hold the model for one forward pass; refuse politely when too much work is queued."""
        if not self.slots.acquire(blocking=False):
            raise Busy(f"The server is busy ({MAX_WAITING} steps are already waiting for the model). "
                       "Try again in a moment.")
        try:
            if not self.lock.acquire(timeout=MAX_WAIT_S):
                raise Busy(f"The server is busy: your step waited {MAX_WAIT_S:.0f} s for the model. "
                           "Try again in a moment.")
            try:
                yield
            finally:
                self.lock.release()
        finally:
            self.slots.release()


def bundled_models() -> list[str]:
    """Names of the models shipped in assets/models/, default first."""
    if not MODELS_DIR.is_dir():
        return []
    names = sorted(p.name for p in MODELS_DIR.iterdir() if (p / "config.json").is_file())
    return sorted(names, key=lambda n: n != DEFAULT_MODEL)


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
        if not local.is_dir():
            raise NotACausalLM(f"'{source}' is a file, not a model folder.")
        if not (local / "config.json").is_file():
            raise NotACausalLM(f"'{source}' holds no config.json, so it is not a model folder.")
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


def hub_reachable(timeout: float = 2.0) -> bool:
    """Can the Hugging Face hub be reached? Checked once, quickly, instead of minutes of retries."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("DECODE_LAB_OFFLINE") == "1":
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _whole(value, name: str, source: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise NotACausalLM(f"'{source}' has an unusable config: {name} must be a whole number from {lo:,} to "
                           f"{hi:,} (it is {str(value)[:40]!r}).")
    return value


def check_config(config, source: str) -> None:
    """The figures every page and estimate relies on: whole numbers in sane ranges, heads that divide evenly."""
    text = config.get_text_config(decoder=True)
    layers = _whole(getattr(text, "num_hidden_layers", None), "num_hidden_layers", source, 1, MAX_LAYERS)
    d_model = _whole(getattr(text, "hidden_size", None), "hidden_size", source, 1, MAX_WIDTH)
    heads = _whole(getattr(text, "num_attention_heads", None), "num_attention_heads", source, 1, MAX_HEADS)
    kv = getattr(text, "num_key_value_heads", None)
    kv = heads if kv is None else _whole(kv, "num_key_value_heads", source, 1, heads)
    if heads % kv:
        raise NotACausalLM(f"'{source}' has an unusable config: {heads} query heads cannot share {kv} key/value heads evenly.")
    head_dim = getattr(text, "head_dim", None)
    if head_dim is None and d_model % heads:
        raise NotACausalLM(f"'{source}' has an unusable config: hidden_size {d_model} is not a multiple of {heads} heads.")
    if head_dim is not None:
        _whole(head_dim, "head_dim", source, 1, MAX_WIDTH)
    _whole(getattr(text, "vocab_size", None), "vocab_size", source, 1, MAX_VOCAB)
    for name in ("intermediate_size", "n_inner", "ffn_dim"):
        if getattr(text, name, None) is not None:
            _whole(getattr(text, name), name, source, 1, 4 * MAX_WIDTH)
    for name in ("max_position_embeddings", "n_positions", "sliding_window"):
        if getattr(text, name, None) is not None:
            _whole(getattr(text, name), name, source, 1, MAX_POSITIONS)
    del layers


def check_causal_lm(config, source: str) -> None:
    """Refuse encoder-decoder and encoder-only models: the app steps decoder-only LMs."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    if getattr(config, "is_encoder_decoder", False):
        raise NotACausalLM(f"'{source}' is an encoder-decoder model ({config.model_type}); "
                           "Decode Lab steps decoder-only causal language models.")
    archs = getattr(config, "architectures", None) or []
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING or (
        archs and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
    ):
        kind = ", ".join(str(a)[:60] for a in archs) or config.model_type
        raise NotACausalLM(f"'{source}' is not a decoder-only causal language model ({kind}).")


def parameter_bound(config) -> int:
    """An upper estimate of the parameter count from the config's figures alone (no module is built).

    Per layer: Q, K, V, O projections, a gated MLP of three matrices, norms; plus embeddings and
    an untied LM head. Generous on purpose: it only decides what is too big to try.
    """
    t = config.get_text_config(decoder=True)
    d = t.hidden_size
    heads = t.num_attention_heads
    kv = getattr(t, "num_key_value_heads", None) or heads
    hd = getattr(t, "head_dim", None) or d // heads
    ff = getattr(t, "intermediate_size", None) or getattr(t, "n_inner", None) or getattr(t, "ffn_dim", None) or 4 * d
    experts = getattr(t, "num_local_experts", None) or getattr(t, "num_experts", None) or 1
    per_layer = 2 * d * heads * hd + 2 * d * kv * hd + 3 * d * ff * experts + 4 * d
    positions = getattr(t, "max_position_embeddings", None) or getattr(t, "n_positions", None) or 0
    return int(t.num_hidden_layers * per_layer + 2 * t.vocab_size * d + positions * d)


def estimate_parameters(config) -> int:
    """Exact parameter count from the config alone (built on the meta device: no memory used).

    Only called once parameter_bound and the layer cap have passed, so the tree it builds is bounded.
    """
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    return sum(p.numel() for p in model.parameters())


def check_memory(config, source: str, device: torch.device, dtype: torch.dtype) -> int:
    """Raise TooLarge before anything is built if the weights cannot fit; return the parameter count."""
    have = dev.available_bytes(device)
    elem = torch.finfo(dtype).bits // 8

    def refuse(params: int, how: str):
        need = params * elem
        raise TooLarge(
            f"'{source}' has {params / 1e9:.2f} B parameters: about {need / 2**30:.1f} GiB in {_dtype_name(dtype)} "
            f"({how} from its config), but only {have / 2**30:.1f} GiB is free on {device.type}. "
            "Choose a smaller model or a smaller dtype."
        )

    bound = parameter_bound(config)
    if bound * elem > 4 * have:  # far too big: refuse on the bound, build nothing
        refuse(bound, "estimate")
    try:
        params = estimate_parameters(config)
    except Exception:  # noqa: BLE001 - figures that pass the checks can still contradict each other
        raise NotACausalLM(f"'{source}' has a config whose figures do not fit together; transformers cannot build it.") from None
    if params * elem * MEMORY_HEADROOM > have:
        refuse(params, "estimate")
    return params


def check_weights(path: str, source: str) -> None:
    """A local folder's weights must be safetensors files inside it, each with a header that parses.

    The index (model.safetensors.index.json) may only name .safetensors files of this folder: one that
    names a pickle file or points outside would have transformers read it another way.
    """
    folder = Path(path)
    if not folder.is_dir():
        return  # a hub id: from_pretrained(use_safetensors=True) fetches only safetensors files
    names = [p.name for p in folder.iterdir()]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            shards = sorted(set(weight_map.values()))
        except Exception:  # noqa: BLE001
            raise UnsafeWeights(f"'{source}' has a safetensors index that cannot be read.") from None
        for shard in shards:
            if not isinstance(shard, str) or not shard.endswith(".safetensors") or Path(shard).name != shard:
                raise UnsafeWeights(f"'{source}' has a safetensors index that names a file that is not a "
                                    "safetensors file of its own folder; Decode Lab loads safetensors only.")
    else:
        shards = [n for n in names if n.endswith(".safetensors")]
    if not shards:
        if any(n.endswith(PICKLE_SUFFIXES) for n in names):
            raise UnsafeWeights(f"'{source}' has weights only in pickle format (.bin/.pt). Unpickling can run "
                                "arbitrary code, so Decode Lab loads safetensors only.")
        raise NotACausalLM(f"'{source}' has a config but no model weights (*.safetensors).")
    from safetensors import safe_open

    for shard in shards:
        try:
            with safe_open(str(folder / shard), framework="pt") as f:
                f.keys()
        except Exception:  # noqa: BLE001 - SafetensorError, OSError: a missing, corrupt or lying file
            raise UnsafeWeights(f"'{source}' has a weights file that is missing or corrupt (its safetensors "
                                "header does not describe its contents).") from None


def load_model(source: str = "default", device: str | None = None, dtype: str | torch.dtype | None = None,
               warmup: bool = True) -> LoadedModel:
    """Load a causal LM for stepping: bundled name, "default", hub id or local folder.

    Raises a ModelLoadError subclass with a message fit for the UI.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        torch_device = dev.pick_device(device)
        torch_dtype = dev.pick_dtype(torch_device, dtype)
    except ValueError as e:
        raise ModelLoadError(str(e)) from None
    path = resolve_source(source)
    config = read_config(source)
    check_causal_lm(config, source)
    params = check_memory(config, source, torch_device, torch_dtype)
    check_weights(path, source)

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
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch_dtype, attn_implementation=capture.IMPLEMENTATION if captures else "eager",
            use_safetensors=True, trust_remote_code=False,
        )
    except OSError as e:
        if ".bin" in str(e) or "safetensors" in str(e):
            raise UnsafeWeights(f"'{source}' offers no safetensors weights; Decode Lab does not unpickle .bin files.") from None
        raise ModelNotFound(f"Could not load the weights of '{source}'.") from None
    except Exception:  # noqa: BLE001 - weights that do not match their config, a truncated file, ...
        raise ModelLoadError(f"Could not load '{source}': its weights do not match its config or are damaged.") from None
    model.to(torch_device).eval()

    lm = LoadedModel(model=model, tokenizer=tokenizer, spec=from_config(model.config, source, params, "its config"),
                     device=torch_device, dtype=torch_dtype, captures=captures)
    if warmup:
        from engine.forward import warm_up

        lm.warmup_ms = warm_up(lm)
    return lm


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
