"""The checks a model must pass before any weight is read (see engine/load/load.py for their order).

Each refusal is a typed DecodeLabError whose message names the model as it was asked for, never a
path of the server: a folder's files, a config's figures, the parameter count against free memory,
and exactly which safetensors files transformers would read.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch

from engine import device as dev
from engine.errors import NotACausalLM, TooLarge, UnsafeWeights
from engine.forward.spec import EXPERT_FIELDS

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
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


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


_COUNTED: dict[str, int] = {}  # a config's JSON -> its parameter count: the ladder and the calculator ask again


def estimate_parameters(config) -> int:
    """Exact parameter count from the config alone (built on the meta device: no memory used), once per config.

    Only called once parameter_bound and the layer cap have passed, so the tree it builds is bounded.
    """
    from transformers import AutoModelForCausalLM

    key = f"{type(config).__name__}:{config.to_json_string(use_diff=False)}"
    if key not in _COUNTED:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        _COUNTED[key] = sum(p.numel() for p in model.parameters())
    return _COUNTED[key]


def check_memory(config, source: str, device: torch.device, dtype: torch.dtype) -> int:
    """Raise TooLarge before anything is built if the weights cannot fit; return the parameter count."""
    have = dev.available_bytes(device)
    elem = torch.finfo(dtype).bits // 8

    def refuse(params: int, how: str):
        need = params * elem
        raise TooLarge(
            f"'{source}' has {params / 1e9:.2f} B parameters: about {need / 2**30:.1f} GiB in {str(dtype).removeprefix('torch.')} "
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
    from engine.transformers_internals import hub_file

    for local_only in (True, False):
        if not local_only and not hub_reachable():
            return None
        try:
            found = hub_file(repo, name, local_only)
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

