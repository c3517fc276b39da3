"""The gpu tier: on a CUDA GPU, the lean path gives the readable path's tokens, its decode step is captured as a
CUDA graph, and the race at the defaults is exact.

Every test here asks for the `cuda` fixture, so tests/conftest.py puts it in the `gpu` tier: it runs only when
`-m gpu` asks (`python -m engine gpu-check` does), and on a machine without CUDA fails in one line.
No assert reads a timing beyond "compile time is kept apart" (the GPU's figures are gpu-check's targets).
"""

from __future__ import annotations

import json

import pytest
import torch

from engine.forward.sampling import Sampling
from engine.generate.compare import compare
from engine.generate.stepper import Stepper
from engine.load.load import load_model
from engine.paths import ASSETS
from physics import compiled

PROMPT = "Once upon a time, there was a little girl named Lily. She"


@pytest.fixture(scope="module")
def gpu_lm(cuda):
    """The bundled default model on the GPU, as the app loads it (no dtype asked)."""
    return load_model("default", device="cuda")


def race_defaults() -> tuple[str, Sampling]:
    """The Race page's defaults: its first preset prompt, greedy (the sidebar's default sampling)."""
    prompts = json.loads((ASSETS / "prompts.json").read_text(encoding="utf-8"))
    return prompts[0]["prompt"], Sampling()


def test_the_bundled_model_runs_in_fp32_on_the_gpu(gpu_lm):
    assert gpu_lm.device.type == "cuda" and gpu_lm.dtype == torch.float32


def test_lean_tokens_and_logits_equal_the_readable_paths_on_the_gpu(gpu_lm):
    run = Stepper(gpu_lm, PROMPT, max_new_tokens=64, stop_on_eos=False, record=False, repeats=1)
    run.run()
    ids = run.ids[:, :run.prompt_len]
    assert compiled.greedy(gpu_lm, ids, 64) == run.generated_ids  # compiled, CUDA graphs: the default on a GPU
    lean = compiled.CompiledRecipe(gpu_lm, ids.shape[1] + 2)
    with gpu_lm.turn(), torch.no_grad():
        readable = gpu_lm.model(input_ids=ids.to(gpu_lm.device)).logits[:, -1]
        torch.testing.assert_close(lean.full(ids), readable, rtol=1e-3, atol=1e-3)


def test_the_decode_step_is_captured_as_a_cuda_graph_and_its_compile_kept_apart(gpu_lm):
    ids = gpu_lm.tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    timing, lean = compiled.time_decode(gpu_lm, ids, repeats=5)
    assert lean.graph_captured, lean.how
    assert lean.how.endswith("(reduce-overhead: CUDA graphs)")
    assert lean.compile_ms["decode"] > timing.high_ms  # compiling and recording are never a step's time


def test_the_race_is_exact_at_the_defaults_over_512_tokens(gpu_lm):
    prompt, sampling = race_defaults()
    room = gpu_lm.spec.max_positions - len(gpu_lm.tokenizer(prompt)["input_ids"])
    report = compare(gpu_lm, prompt, room, sampling=sampling, stop_on_eos=False)
    assert len(report.tokens["cache"]) == room and gpu_lm.spec.max_positions == 512
    assert report.identical, f"the runs parted at step {report.first_divergence_step}"


def interleaved_passes_match_eager(lm, device: str, rows=(1, 4, 8), rounds: int = 3) -> None:
    """The curve times its passes in rounds (topics/ladder/curve.py): the compiled lean pass for n = 1 and the one
    for every n ≥ 2 (on a GPU a CUDA graph recorded for each n), called in turn round after round, each give what
    the same pass gives uncompiled."""
    from engine import torch_internals
    from engine.forward.lean import LeanLlama, compiled_pass

    ids = lm.tokenizer(PROMPT, return_tensors="pt")["input_ids"].to(device)
    lean = LeanLlama(lm.model, max_batch=1, max_len=ids.shape[1] + 1, one_row_kernel=False)
    one, many = compiled_pass(lean), compiled_pass(lean)
    with torch.no_grad():
        want = {n: lean(ids[:, :n], torch.arange(n, device=device)).clone() for n in rows}
        for _ in range(rounds):
            for n in rows:
                x, where = ids[:, :n], torch.arange(n, device=device)
                if n > 1:
                    torch_internals.mark_dynamic(x, 1)
                    torch_internals.mark_dynamic(where, 0)
                if device == "cuda":
                    torch.compiler.cudagraph_mark_step_begin()
                got = (one if n == 1 else many)(x, where).clone()
                torch.testing.assert_close(got, want[n], rtol=1e-3, atol=1e-3)
    torch.compiler.reset()


def test_the_curves_passes_timed_in_rounds_give_each_ns_own_logits_on_the_gpu(gpu_lm):
    interleaved_passes_match_eager(gpu_lm, "cuda")


def test_the_narrow_kernels_give_their_storages_product_inside_a_cuda_graph(cuda):
    """The int8 and int4 Triton kernels, compiled by Triton for this GPU at their measured block sizes, called inside
    the lean pass's compiled graph (CUDA graphs): at Llama-3-8B's MLP shapes (the down projection's rows long enough
    for int8's wider tile) and an odd one, one row and several, each the product of the matrix its storage keeps,
    worked out in float64."""
    from topics.bytes import gpu_kernels, storage

    assert gpu_kernels.why_not(torch.device("cuda")) is None
    gen = torch.Generator(device="cuda").manual_seed(0)
    for out, inn in ((14336, 4096), (4096, 14336), (1000, 384)):
        w = torch.randn(out, inn, device="cuda", generator=gen).bfloat16()
        for name in ("int8", "int4"):
            module = storage.narrow(w, name)
            assert module.triton, name
            kept = storage.rounded(w, name).double()
            fn = torch.compile(module, fullgraph=True, options={"triton.cudagraphs": True})
            for rows in (1, 3):
                x = torch.randn(1, rows, inn, device="cuda", generator=gen).bfloat16()
                want = x.double() @ kept.T
                with torch.no_grad():
                    for _ in range(3):  # the warm-up, the recording, a replay
                        torch.compiler.cudagraph_mark_step_begin()
                        got = fn(x).clone()
                err = ((got.double() - want).abs().max() / want.abs().max()).item()
                assert err < 2e-2, (out, inn, name, rows, err)
    torch.compiler.reset()
