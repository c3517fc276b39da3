"""`python -m engine bench --peers`: the lean pass beside an engine people run on a CPU, on the same weights.

The peer is CTranslate2 (`pip install -r requirements-dev.txt` installs it), fp32, one thread, like the lean pass.
Both run the same rung of the bundled model's family (physics.rungs: the ≥ 100 M one by default, random weights
of the right shapes), converted once for CTranslate2 by its own converter from the very tensors the lean pass holds.

    decode    one token on top of `context` positions: the lean pass compiled (its kernel named), against the
              time between two tokens CTranslate2's `generate_tokens` streams at the same context
    prefill   the `context`-token prompt in one pass, to the first token: the lean pass against
              CTranslate2's `generate_batch(max_length=1)`

Each path is run twice first (compiles, allocations: the warm-up, reported apart, never timed). Then the four
alternate for `rounds` rounds, in an order that turns each round, so a slow minute lands on both engines alike;
each ratio is the median over rounds of that round's lean ÷ peer, with its spread. Both engines' first greedy
token after the prompt is compared: the same weights give the same token (a check that the peer ran them).
llama.cpp is not timed here: its Python package is not among this project's requirements.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import asdict, dataclass

import torch

from engine.forward.lean import LeanLlama, compiled_pass, run_once
from engine.load.load import load_model
from engine.timing import now, timed
from physics.rungs import rung_model


@dataclass(frozen=True)
class PeerRace:
    """The lean pass and CTranslate2 on one rung's weights, timed in the same rounds (milliseconds)."""

    rung: str
    weights_mb: float
    context: int
    rounds: int
    lean_kernel: str  # which one-row product the lean decode ran (engine/forward/streamed.py)
    peer: str  # "CTranslate2 4.x, float32, 1 thread"
    lean_decode_ms: float  # medians over every round's median
    peer_decode_ms: float
    lean_prefill_ms: float
    peer_prefill_ms: float
    decode_ratio_rounds: tuple[float, ...]  # lean ÷ peer, each round's
    prefill_ratio_rounds: tuple[float, ...]
    warmup_s: dict  # each path's two warm-up runs, compiles included (excluded from every time above)
    same_first_token: bool  # both engines' greedy token after the prompt

    @property
    def decode_ratio(self) -> float:
        return statistics.median(self.decode_ratio_rounds)

    @property
    def prefill_ratio(self) -> float:
        return statistics.median(self.prefill_ratio_rounds)

    def to_dict(self) -> dict:
        return asdict(self) | {"decode_ratio": self.decode_ratio, "prefill_ratio": self.prefill_ratio}

    def table(self) -> str:
        """What a terminal prints: each engine's medians, and the ratios with their spread over rounds."""
        def spread(xs):
            return f"{min(xs):.2f}–{max(xs):.2f}"
        return "\n".join([
            f"{self.rung} ({self.weights_mb:.0f} MB of fp32 weights), context {self.context}, {self.rounds} rounds, "
            f"one thread; lean decode kernel: {self.lean_kernel}; peer: {self.peer}",
            f"  decode step     lean {self.lean_decode_ms:7.1f} ms   peer {self.peer_decode_ms:7.1f} ms   "
            f"lean/peer ×{self.decode_ratio:.2f} (rounds {spread(self.decode_ratio_rounds)})",
            f"  prefill {self.context:<4}    lean {self.lean_prefill_ms:7.1f} ms   peer {self.peer_prefill_ms:7.1f} ms   "
            f"lean/peer ×{self.prefill_ratio:.2f} (rounds {spread(self.prefill_ratio_rounds)})",
            "  warm-up excluded: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.warmup_s.items()),
            f"  same first greedy token from both: {'yes' if self.same_first_token else 'NO'}"])


def peer_generator(rlm, folder: str):
    """The rung's weights in CTranslate2's format (its own converter, fp32), loaded for one thread."""
    import ctranslate2

    rlm.model.save_pretrained(f"{folder}/hf")  # safetensors
    rlm.tokenizer.save_pretrained(f"{folder}/hf")
    ctranslate2.converters.TransformersConverter(f"{folder}/hf").convert(f"{folder}/ct2", quantization="float32")
    gen = ctranslate2.Generator(f"{folder}/ct2", device="cpu", compute_type="float32", intra_threads=1)
    return gen, f"CTranslate2 {ctranslate2.__version__}, float32, 1 thread"


def race_peers(size: str = "112M", context: int = 128, rounds: int = 7, steps: int = 8, log=print) -> PeerRace:
    """The lean pass against CTranslate2 on rung `size`, `rounds` interleaved rounds of `steps` decode steps."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError as e:
        raise SystemExit("bench --peers needs CTranslate2: pip install -r requirements-dev.txt") from e
    torch.set_num_threads(1)
    rlm = rung_model(load_model("default", device="cpu"), size)
    ids = torch.randint(0, rlm.spec.vocab, (1, context), generator=torch.Generator().manual_seed(0))
    tokens = rlm.tokenizer.convert_ids_to_tokens(ids[0].tolist())
    prompt_pos, where = torch.arange(context), torch.tensor([context])
    lean = LeanLlama(rlm.model, max_batch=1, max_len=context + 2)
    fn = compiled_pass(lean)
    with tempfile.TemporaryDirectory() as folder:
        log(f"converting the {rlm.spec.name} rung for CTranslate2 ...")
        gen, peer = peer_generator(rlm, folder)

        def lean_prefill():
            return run_once(fn, ids, prompt_pos)

        def lean_decode():  # the step after the prompt: the cache holds `context` positions
            times = [run_once(fn, ids[:, -1:], where) for _ in range(steps)]
            return statistics.median(times)

        def peer_prefill():
            return timed(lambda: gen.generate_batch([tokens], max_length=1, include_prompt_in_result=False),
                         repeats=1, warmup=0).forward_ms

        def peer_decode():  # the gaps between streamed tokens: one decode step each, context upward
            stamps = [now() for _ in gen.generate_tokens(tokens, max_length=steps + 1, min_length=steps + 1,
                                                         sampling_topk=1)]
            return statistics.median((b - a) * 1e3 for a, b in zip(stamps, stamps[1:]))

        paths = {"lean prefill": lean_prefill, "lean decode": lean_decode, "peer prefill": peer_prefill,
                 "peer decode": peer_decode}
        warmup_s = {}
        for name, run in paths.items():
            t0 = now()
            run(), run()
            warmup_s[name] = now() - t0
            log(f"{name}: warmed up in {warmup_s[name]:.1f} s")
        with torch.no_grad():
            lean_first = int(lean(ids, prompt_pos).argmax(-1))
        peer_first = gen.generate_batch([tokens], max_length=1, include_prompt_in_result=False)[0].sequences_ids[0][0]
        got = {name: [] for name in paths}
        for r in range(rounds):
            order = list(paths)[r % 4:] + list(paths)[: r % 4]
            for name in order:
                got[name].append(paths[name]())
            log(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {got[n][-1]:.1f} ms" for n in paths))
    med = {name: statistics.median(xs) for name, xs in got.items()}
    return PeerRace(
        rung=rlm.spec.name, weights_mb=sum(p.numel() * p.element_size() for p in rlm.model.parameters()) / 1e6,
        context=context, rounds=rounds, lean_kernel=lean.kernel, peer=peer,
        lean_decode_ms=med["lean decode"], peer_decode_ms=med["peer decode"],
        lean_prefill_ms=med["lean prefill"], peer_prefill_ms=med["peer prefill"],
        decode_ratio_rounds=tuple(a / b for a, b in zip(got["lean decode"], got["peer decode"])),
        prefill_ratio_rounds=tuple(a / b for a, b in zip(got["lean prefill"], got["peer prefill"])),
        warmup_s=warmup_s, same_first_token=lean_first == peer_first)
