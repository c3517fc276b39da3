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

import json
import os
import re
import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import torch

from engine.forward import capture
from engine.load import device as dev
from engine.errors import (
    Busy,
    DecodeLabError,
    ModelLoadError,
    ModelNotFound,
    NoTokenizer,
    NotACausalLM,
    RemoteCodeRequired,
    TooLarge,
    UnsafeWeights,
)
from engine.forward.spec import ModelSpec, from_config
from engine.paths import MODELS_DIR

DEFAULT_MODEL = "tinystories-llama"
DRAFT_MODEL = "tinystories-draft"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
MEMORY_HEADROOM = 1.3  # weights x this must fit: activations, cache and the copy made while loading
MAX_LAYERS = 256  # the deepest published decoder has 126; a config with more is refused unread
MAX_WIDTH = 65_536  # hidden size, intermediate size, head_dim
MAX_HEADS = 1_024
MAX_VOCAB = 2_000_000
MAX_POSITIONS = 10_000_000
MAX_EXPERTS = 65_536  # experts per layer (Doge has 16,384 tiny ones); transformers fuses them into one tensor
MAX_LIST = 16_384  # entries in any list of a config
MAX_CONFIG_BYTES = 2**20  # the largest published config.json is a few tens of KiB
MAX_FILE_BYTES = 2**28  # a tokenizer or index file (the largest tokenizer.json is ~35 MB)
WEIGHT_SHARE = 0.5  # the weights files must hold at least this share of the parameters the config describes
EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts")
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
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
    captures: bool  # Q/K/V are read off the real tensors (engine.forward.capture); else derived from the config
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


def check_folder(folder: Path, source: str) -> None:
    """A local model folder: a folder, with a config.json, whose files are regular files of sane size.

    A named pipe or a device (a symlink to /dev/zero) would block or never end when read; a huge
    config.json would be parsed whole. Weights are checked apart (weight_files, stored_numbers), by their headers.
    """
    if not folder.is_dir():
        raise NotACausalLM(f"'{source}' is a file, not a model folder.")
    if not (folder / "config.json").is_file():
        raise NotACausalLM(f"'{source}' holds no config.json, so it is not a model folder.")
    for entry in folder.iterdir():
        if entry.name.endswith(".safetensors") or not entry.name.endswith((".json", ".txt", ".model", ".jinja")):
            continue
        try:
            size = entry.stat().st_size if entry.is_file() else None
        except OSError:
            size = None
        limit = MAX_CONFIG_BYTES if entry.name == "config.json" else MAX_FILE_BYTES
        if size is None or size > limit:
            raise NotACausalLM(f"'{source}' holds a file that is not an ordinary model file ({entry.name[:60]!r}: "
                               "not a regular file, or far too large).")


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
    for name in EXPERT_FIELDS:  # 0 or absent: a dense model
        if getattr(text, name, None) is not None:
            _whole(getattr(text, name), name, source, 0, MAX_EXPERTS)
    del layers
    check_counts(config.to_dict(), source)


# Figures that multiply modules, in the model and in every sub-model (text_config, vision_config, ...):
# num_hidden_layers, n_layer, decoder_layers, depth, num_blocks... and experts per layer.
_LAYER_COUNT = re.compile(r"(?:^|_)(?:num|n)_\w*?(?:layers?|blocks)$|^(?:depth|layers|decoder_layers|encoder_layers)$")
_PER_LAYER_LIST = re.compile(r"(?:layers|types?|depths)$")


def check_counts(tree: dict, source: str) -> None:
    """Refuse a config (or any sub-config) whose layer, block or expert counts would take minutes to build."""
    for key, value in tree.items():
        key = str(key)
        if isinstance(value, dict):
            check_counts(value, source)
        elif isinstance(value, list):
            limit = MAX_LAYERS if _PER_LAYER_LIST.search(key) else MAX_LIST
            total = sum(v for v in value if isinstance(v, int)) if key.endswith("depths") else 0
            if len(value) > limit or total > MAX_LAYERS:
                raise NotACausalLM(f"'{source}' has an unusable config: {key[:40]} lists {len(value):,} entries "
                                   f"(at most {limit:,}).")
        elif isinstance(value, int) and not isinstance(value, bool):
            if _LAYER_COUNT.search(key) and value > MAX_LAYERS:
                raise NotACausalLM(f"'{source}' has an unusable config: {key[:40]} is {value:,} (at most "
                                   f"{MAX_LAYERS}).")
            if key.endswith("experts") and value > MAX_EXPERTS:
                raise NotACausalLM(f"'{source}' has an unusable config: {key[:40]} is {value:,} (at most "
                                   f"{MAX_EXPERTS:,}).")


def check_causal_lm(config, source: str) -> None:
    """Refuse encoder-decoder and encoder-only models: the app steps decoder-only LMs."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    if getattr(config, "is_encoder_decoder", False):
        raise NotACausalLM(f"'{source}' is an encoder-decoder model ({config.model_type}); "
                           "Decode Lab steps decoder-only causal language models.")
    archs = getattr(config, "architectures", None) or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise NotACausalLM(f"'{source}' has an unusable config: architectures must be a list of class names.")
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
    experts = max(getattr(t, name, None) or 1 for name in EXPERT_FIELDS)
    router = d * experts if experts > 1 else 0
    per_layer = 2 * d * heads * hd + 2 * d * kv * hd + 3 * d * ff * experts + router + 4 * d
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


def _refuse_pickle(source: str):
    return UnsafeWeights(f"'{source}' names weights that are not safetensors files of its own folder (a pickle "
                         ".bin can run arbitrary code when read); Decode Lab loads safetensors only.")


def _shard_name(name, source: str) -> str:
    """A weights file transformers may open: `*.safetensors`, directly in the model's folder."""
    if not isinstance(name, str) or not name.endswith(".safetensors") or Path(name).name != name:
        raise _refuse_pickle(source)
    return name


def _index_shards(index: Path, source: str) -> list[str]:
    """The files a safetensors index names: each must be a safetensors file of the same folder."""
    try:
        if index.stat().st_size > MAX_FILE_BYTES:
            raise ValueError
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()), key=str)
    except Exception:  # noqa: BLE001 - unreadable, not JSON, no weight_map, not a dict
        raise UnsafeWeights(f"'{source}' has a safetensors index that cannot be read.") from None
    if not shards:
        raise UnsafeWeights(f"'{source}' has a safetensors index that names no weights.")
    return [_shard_name(s, source) for s in shards]


def weight_files(path: str, source: str, config) -> list[Path] | None:
    """Exactly the weights files transformers will read for this folder, each checked to be safetensors.

    transformers reads, in this order: the file the config's `transformers_weights` names, else
    model.safetensors, else the files model.safetensors.index.json names (with use_safetensors=True it
    never looks for a .bin by itself). A folder with adapter_config.json would make transformers (with
    peft installed) load another model named inside it: refused. None for a hub id (see _check_hub).
    """
    folder = Path(path)
    if not folder.is_dir():
        _check_hub(path, source, config)
        return None
    if (folder / "adapter_config.json").exists():
        raise UnsafeWeights(f"'{source}' is an adapter (adapter_config.json) that names another model to load; "
                            "Decode Lab loads whole models only.")
    explicit = getattr(config, "transformers_weights", None)
    if explicit is not None:
        named_index = isinstance(explicit, str) and explicit.endswith(".safetensors.index.json")
        if named_index and Path(explicit).name == explicit:
            shards = _index_shards(folder / explicit, source)
        else:
            shards = [_shard_name(explicit, source)]
    elif (folder / SINGLE).exists():
        shards = [SINGLE]
    elif (folder / INDEX).exists():
        shards = _index_shards(folder / INDEX, source)
    elif any(p.name.endswith(PICKLE_SUFFIXES) for p in folder.iterdir()):
        raise UnsafeWeights(f"'{source}' has weights only in pickle format (.bin/.pt). Unpickling can run "
                            "arbitrary code, so Decode Lab loads safetensors only.")
    else:
        raise NotACausalLM(f"'{source}' has a config but no model weights (model.safetensors).")
    return [folder / s for s in shards]


def stored_numbers(files: list[Path], source: str) -> int:
    """How many numbers the weights files hold, read from their headers only (safetensors checks each
    header against the file: a corrupt one, or one whose offsets run past the end, is refused)."""
    from safetensors import safe_open

    total = 0
    for file in files:
        try:
            if not file.is_file():
                raise OSError
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():
                    n = 1
                    for dim in f.get_slice(key).get_shape():
                        n *= dim
                    total += n
        except Exception:  # noqa: BLE001 - SafetensorError, OSError: a missing, corrupt or lying file
            raise UnsafeWeights(f"'{source}' has a weights file that is missing or corrupt (its safetensors "
                                "header does not describe its contents).") from None
    return total


def _hub_file(repo: str, name: str) -> str | None:
    """A small file of a hub repository: from the local cache, else (if the hub answers) downloaded; None if absent."""
    from transformers.utils.hub import cached_file

    quiet = dict(_raise_exceptions_for_missing_entries=False, _raise_exceptions_for_connection_errors=False,
                 _raise_exceptions_for_gated_repo=False)
    for local_only in (True, False):
        if not local_only and not hub_reachable():
            return None
        try:
            found = cached_file(repo, name, local_files_only=local_only, **quiet)
        except Exception:  # noqa: BLE001 - no such repository or file: nothing to check
            found = None
        if found:
            return found
    return None


def _check_hub(repo: str, source: str, config) -> None:
    """A hub id (offered by the teacher, or typed on an open server): the same rules as a folder, on its
    index and adapter files, before transformers downloads any weights."""
    explicit = getattr(config, "transformers_weights", None)
    if explicit is not None and not (isinstance(explicit, str) and Path(explicit).name == explicit
                                     and explicit.endswith((".safetensors", ".safetensors.index.json"))):
        raise _refuse_pickle(source)
    if _hub_file(repo, "adapter_config.json"):
        raise UnsafeWeights(f"'{source}' is an adapter (adapter_config.json) that names another model to load; "
                            "Decode Lab loads whole models only.")
    indexes = [INDEX] + ([explicit] if explicit and explicit.endswith(".index.json") and explicit != INDEX else [])
    for name in indexes:
        index = _hub_file(repo, name)
        if index:
            _index_shards(Path(index), source)


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
        torch_dtype = dev.pick_dtype(torch_device, dtype)
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
    if warmup:
        from engine.forward.run import warm_up

        lm.warmup_ms = warm_up(lm)
    return lm


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
