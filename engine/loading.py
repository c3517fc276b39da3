"""Load a causal LM safely and describe it for display.

Safe means: safetensors only (pickle weights are refused, never unpickled),
`trust_remote_code` never, eager attention (so attention weights exist), and
a memory check from the config *before* any weight is read.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import torch

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

MODELS_DIR = Path(__file__).resolve().parent.parent / "assets" / "models"
DEFAULT_MODEL = "tinystories-llama"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
MEMORY_HEADROOM = 1.3  # weights x this must fit: activations, cache and the copy made while loading


@dataclass(frozen=True)
class ModelSummary:
    """What the UI shows about a model; every field read from its config or weights."""

    source: str
    architecture: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    d_model: int
    vocab: int
    max_positions: int
    parameters: int
    dtype: str
    device: str

    @property
    def attention(self) -> str:
        """MHA (every head has its own K/V), GQA (groups share), MQA (one K/V head)."""
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    def as_rows(self) -> list[tuple[str, str]]:
        return [
            ("source", self.source), ("architecture", self.architecture), ("layer", str(self.layers)),
            ("head (query heads)", str(self.heads)),
            ("kv_head (key/value heads)", f"{self.kv_heads} ({self.attention})"),
            ("head_dim", str(self.head_dim)), ("d_model", str(self.d_model)), ("vocab", f"{self.vocab:,}"),
            ("max positions", f"{self.max_positions:,}"), ("parameters", f"{self.parameters:,}"),
            ("dtype", self.dtype), ("device", self.device),
        ]


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
    summary: ModelSummary
    device: torch.device
    dtype: torch.dtype
    warmup_ms: float = 0.0  # time of the warm-up passes made at load, reported apart from every step
    passes: int = 0  # forward passes run so far; the first one is a warm-up
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    slots: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(MAX_WAITING), repr=False)

    @property
    def config(self):
        return self.model.config

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
    """The model's config, read without weights and without remote code."""
    from transformers import AutoConfig

    path = resolve_source(source)
    local = Path(path)
    if local.exists():
        if not local.is_dir():
            raise NotACausalLM(f"'{source}' is a file, not a model folder.")
        if not (local / "config.json").is_file():
            raise NotACausalLM(f"The folder '{source}' holds no config.json, so it is not a model folder.")
    try:
        try:
            return AutoConfig.from_pretrained(path, trust_remote_code=False, local_files_only=True)
        except OSError:
            if local.exists() or not hub_reachable():
                raise
            return AutoConfig.from_pretrained(path, trust_remote_code=False)
    except ValueError as e:
        if "trust_remote_code" in str(e) or "custom code" in str(e):
            raise RemoteCodeRequired(
                f"'{source}' needs code from its repository to run. Decode Lab never runs downloaded code "
                "(trust_remote_code is off): choose a model that transformers supports natively."
            ) from None
        raise NotACausalLM(f"'{source}' has a config transformers does not recognise: {_first_line(e)}") from None
    except OSError:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("DECODE_LAB_OFFLINE") == "1"
        why = "the hub is switched off here" if offline else "no network, or no such repository"
        raise ModelNotFound(
            f"Could not find '{source}': it is not a bundled model or a local folder, and it is not in the "
            f"Hugging Face cache ({why}). Check the spelling, or download it once while online."
        ) from None


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
        kind = ", ".join(archs) or config.model_type
        raise NotACausalLM(f"'{source}' is not a decoder-only causal language model ({kind}).")


def estimate_parameters(config) -> int:
    """Exact parameter count from the config alone (built on the meta device: no memory used)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
    return sum(p.numel() for p in model.parameters())


def check_memory(config, source: str, device: torch.device, dtype: torch.dtype) -> int:
    """Raise TooLarge before loading if the weights cannot fit; return the parameter count."""
    params = estimate_parameters(config)
    need = params * torch.finfo(dtype).bits // 8
    have = dev.available_bytes(device)
    if need * MEMORY_HEADROOM > have:
        raise TooLarge(
            f"'{source}' has {params / 1e9:.2f} B parameters: about {need / 2**30:.1f} GiB in {_dtype_name(dtype)} "
            f"(estimate from its config), but only {have / 2**30:.1f} GiB is free on {device.type}. "
            "Choose a smaller model or a smaller dtype."
        )
    return params


def check_weights_format(path: str, source: str) -> None:
    """A local folder must hold .safetensors weights; pickle-only folders are refused unread."""
    folder = Path(path)
    if not folder.is_dir():
        return  # a hub id: from_pretrained(use_safetensors=True) refuses pickle-only repos itself
    files = [p.name for p in folder.iterdir()]
    if any(f.endswith(".safetensors") for f in files):
        return
    if any(f.endswith(PICKLE_SUFFIXES) for f in files):
        raise UnsafeWeights(
            f"'{source}' has weights only in pickle format ({', '.join(f for f in files if f.endswith(PICKLE_SUFFIXES))}). "
            "Unpickling can run arbitrary code, so Decode Lab loads safetensors only."
        )
    raise NotACausalLM(f"The folder '{source}' has a config but no model weights (*.safetensors).")


def load_model(source: str = "default", device: str | None = None, dtype: str | torch.dtype | None = None,
               warmup: bool = True) -> LoadedModel:
    """Load a causal LM for stepping: bundled name, "default", hub id or local folder.

    Raises a ModelLoadError subclass with a message fit for the UI.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch_device = dev.pick_device(device)
    torch_dtype = dev.pick_dtype(torch_device, dtype)
    path = resolve_source(source)
    config = read_config(source)
    check_causal_lm(config, source)
    check_weights_format(path, source)
    params = check_memory(config, source, torch_device, torch_dtype)

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - any tokenizer failure means "no usable tokenizer"
        raise NoTokenizer(f"'{source}' has no tokenizer Decode Lab can load: {_first_line(e)}") from None
    if tokenizer is None or not tokenizer("Hello", add_special_tokens=False)["input_ids"]:
        # transformers may build an empty tokenizer from a config alone: it encodes nothing
        raise NoTokenizer(f"'{source}' has no tokenizer files (tokenizer.json or vocab files) Decode Lab can load.")

    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch_dtype, attn_implementation="eager",
            use_safetensors=True, trust_remote_code=False,
        )
    except OSError as e:
        if ".bin" in str(e) or "safetensors" in str(e):
            raise UnsafeWeights(f"'{source}' offers no safetensors weights; Decode Lab does not unpickle .bin files.") from None
        raise ModelNotFound(f"Could not load the weights of '{source}': {_first_line(e)}") from None
    except ValueError as e:
        raise ModelLoadError(f"Could not load '{source}': {_first_line(e)}") from None
    model.to(torch_device).eval()

    summary = summarize(model.config, source, params, torch_dtype, torch_device)
    lm = LoadedModel(model=model, tokenizer=tokenizer, summary=summary, device=torch_device, dtype=torch_dtype)
    if warmup:
        lm.warmup_ms = warm_up(lm)
    return lm


def summarize(config, source: str, params: int, dtype: torch.dtype, device: torch.device) -> ModelSummary:
    heads = config.num_attention_heads
    d_model = config.hidden_size
    return ModelSummary(
        source=source,
        architecture=(getattr(config, "architectures", None) or [config.model_type])[0],
        layers=config.num_hidden_layers,
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        head_dim=getattr(config, "head_dim", None) or d_model // heads,
        d_model=d_model,
        vocab=config.vocab_size,
        max_positions=max_positions(config),
        parameters=params,
        dtype=_dtype_name(dtype),
        device=str(device),
    )


def max_positions(config) -> int:
    return int(getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", 2048))


@torch.no_grad()
def warm_up(lm: LoadedModel) -> float:
    """One short prefill and one decode-shaped pass, so no user-visible step pays for first-call setup.

    Returns the warm-up time in ms; it is reported as warm-up and never mixed into step latencies.
    """
    ids = torch.tensor([[lm.tokenizer.eos_token_id or 0] * 4], device=lm.device)
    with lm.turn():
        t0 = time.perf_counter()
        out = lm.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, output_attentions=True)
        lm.model(input_ids=ids[:, :1], attention_mask=torch.ones(1, 5, dtype=torch.long, device=lm.device),
                 past_key_values=out.past_key_values, use_cache=True, output_attentions=True)
        dev.sync(lm.device)
        lm.passes += 2
        return (time.perf_counter() - t0) * 1e3


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__
