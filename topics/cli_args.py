"""What every command of `python -m engine` shares: the model and sampling options, and the --json file.

A bad --json path is refused before the run starts (`check_json_path`), so a long run is never lost at the end.
It sits beside the topics because each topic's cli.py uses it; benchmarks/ and commands/, above, use it too.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load_from(args):
    from engine.load.load import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype)


def sampling_from(args):
    from engine.forward.sampling import Sampling

    # --top-k 0 means "top-k off", exactly as in the app: it does not switch greedy to sampling
    greedy = args.temperature is None and not args.top_k and args.top_p is None
    return Sampling(greedy=greedy, temperature=1.0 if args.temperature is None else args.temperature,
                    top_k=args.top_k or 0, top_p=1.0 if args.top_p is None else args.top_p,
                    repetition_penalty=args.repetition_penalty, seed=args.seed)


class BadPath(Exception):
    """A --json path that cannot be written."""


def check_json_path(path: str | None) -> None:
    """Refuse a --json path that cannot be written, before any work is done.

    Tried, not guessed: the file is opened for appending (and removed again if this made it), so a
    read-only disk, /proc, or a folder only root may write (os.access says yes to root) are all caught.
    """
    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise BadPath(f"--json {path}: that is a folder, not a file")
    if not p.parent.is_dir():
        raise BadPath(f"--json {path}: the folder {p.parent} does not exist")
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as e:
        raise BadPath(f"--json {path}: cannot be written ({e.strerror or type(e).__name__})") from None
    if not existed:
        p.unlink(missing_ok=True)


def write_json(path: str, doc: dict) -> None:
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    print(f"wrote {path}")


def positive(text: str) -> int:
    """argparse type: a whole number >= 1 (argparse turns the ValueError into a one-line usage error)."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def new_tokens_arg(p: argparse.ArgumentParser, default: int, what: str) -> None:
    """--new-tokens N (--steps N is the old spelling of the same number)."""
    p.add_argument("--new-tokens", "--steps", dest="new_tokens", type=int, default=default, help=what)


def model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="default", help="bundled name, 'default', Hugging Face id or local folder")
    p.add_argument("--device", default=None, help="cpu, cuda or mps (default: best available)")
    p.add_argument("--dtype", default=None, help="float32, float16 or bfloat16 (default: fp32 on CPU)")


def sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--temperature", type=float, help="sample with this temperature (default: greedy)")
    p.add_argument("--top-k", dest="top_k", type=int)
    p.add_argument("--top-p", dest="top_p", type=float)
    p.add_argument("--repetition-penalty", dest="repetition_penalty", type=float, default=1.0)
