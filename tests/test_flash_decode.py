"""The CPU decode kernel (engine/forward/flash_decode.cpp) gives what torch's own attention gives on the same
cache, masked past the step's position, for every shape the lean pass can hand it; it reads only the positions up
to the step's own; and where it cannot run, the lean pass keeps SDPA and says why. The reference is
`torch.nn.functional.scaled_dot_product_attention`, never the kernel's own arithmetic."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from engine.forward import flash_decode
from engine.forward.lean import LeanLlama


def sdpa_step(q, k_cache, v_cache, pos: int, kv_len: int = 0) -> torch.Tensor:
    """torch's attention for one query position over the cache's positions 0 .. pos (and below kv_len)."""
    n = min(pos + 1, kv_len) if kv_len else pos + 1
    return F.scaled_dot_product_attention(q, k_cache[:, :, :n], v_cache[:, :, :n], enable_gqa=True)


@pytest.mark.parametrize("batch,kv_heads,group,head_dim,max_len,pos,kv_len", [
    (1, 6, 4, 32, 140, 129, 0),  # the ≥ 100 M rung's shape, a few blocks and a part of one
    (3, 2, 3, 64, 100, 64, 0),  # a batch; a block and one position more
    (2, 4, 1, 16, 70, 69, 40),  # no grouping (MHA), kv_len stopping short of the position
    (1, 1, 8, 128, 10, 0, 0),  # the first position alone
    (1, 8, 4, 128, 300, 255, 0),  # Llama-3-8B's grouping and head_dim, four whole blocks
])
def test_the_kernel_gives_torchs_attention_over_the_positions_up_to_the_steps_own(batch, kv_heads, group, head_dim,
                                                                                   max_len, pos, kv_len):
    gen = torch.Generator().manual_seed(pos + head_dim)
    q = torch.randn(batch, kv_heads * group, 1, head_dim, generator=gen)
    k = 4 * torch.randn(batch, kv_heads, max_len, head_dim, generator=gen)  # scores of tens: a softmax that peaks
    v = torch.randn(batch, kv_heads, max_len, head_dim, generator=gen)
    got = flash_decode.attend(q, k, v, torch.tensor([pos]), kv_len)
    want = sdpa_step(q, k, v, pos, kv_len)
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=2e-5, rtol=1e-4), (got - want).abs().max()


def test_the_kernel_never_reads_a_position_past_the_steps_own():
    """What makes its time the context's bytes: positions past the step's are not read at all, so NaN there
    changes nothing (torch's masked attention over the whole cache reads them, and returns NaN)."""
    q, k, v = torch.randn(1, 8, 1, 32), torch.randn(1, 2, 200, 32), torch.randn(1, 2, 200, 32)
    pos = 130
    k[:, :, pos + 1:], v[:, :, pos + 1:] = float("nan"), float("nan")
    got = flash_decode.attend(q, k, v, torch.tensor([pos]), 0)
    assert torch.isfinite(got).all()
    assert torch.allclose(got, sdpa_step(q, k, v, pos), atol=2e-5)
    mask = torch.arange(200)[None, :] <= pos
    masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert not torch.isfinite(masked).all()


def test_the_lean_pass_says_which_attention_its_decode_step_runs(bundled_lm):
    lean = LeanLlama(bundled_lm.model, 1, 8)
    assert lean.flash_decode and lean.attention == flash_decode.NAME  # a CPU, an fp32 cache
    half = LeanLlama(copy.deepcopy(bundled_lm.model).to(torch.bfloat16), 1, 8)
    assert not half.flash_decode and half.attention == flash_decode.SDPA
    assert "bfloat16" in flash_decode.why_not(torch.device("cpu"), torch.bfloat16, 32, 4)
    assert "cuda" in flash_decode.why_not(torch.device("cuda"), torch.float32, 32, 4)
    assert "17" in flash_decode.why_not(torch.device("cpu"), torch.float32, 32, 17)


def test_without_a_compiler_the_pass_keeps_sdpa_and_gives_the_same_logits(bundled_lm, monkeypatch, tmp_path):
    ids = bundled_lm.tokenizer("Once upon a time", return_tensors="pt")["input_ids"]
    s = ids.shape[1]

    def step(lean):
        with torch.no_grad():
            lean(ids, torch.arange(s))
            return lean(torch.tensor([[7]]), torch.tensor([s]))

    fast = step(LeanLlama(bundled_lm.model, 1, s + 2))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(flash_decode.tempfile, "gettempdir", lambda: str(tmp_path))  # nothing built there yet
    flash_decode._library.cache_clear()
    try:
        lean = LeanLlama(bundled_lm.model, 1, s + 2)
        why = flash_decode.why_not(torch.device("cpu"), torch.float32, lean.head_dim, lean.heads // lean.kv_heads)
        assert not lean.flash_decode and lean.attention == flash_decode.SDPA
        assert why.startswith("the decode kernel did not build") and "no-such-compiler" in why
        assert torch.allclose(step(lean), fast, atol=1e-4)
    finally:
        flash_decode._library.cache_clear()


def test_the_attention_benchmark_times_every_kernel_against_the_plain_read(capsys):
    from benchmarks import decode_attention

    assert decode_attention.main(["--context", "256", "--layers", "2", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for name in ("plain sum of the same K/V", "SDPA, enable_gqa", "grouped as rows", "flash_decode.cpp",
                 "a matrix-vector product over the words"):
        assert name in out
    assert "×1.00 the plain sum" in out and "2 layers × 256 positions" in out
    assert "4-byte words" not in out  # an fp32 cache is read as 4-byte words already


def test_the_attention_benchmark_runs_the_gpus_shape_with_its_bf16_bytes_also_read_as_words(capsys):
    """The GPU's default shape (Llama-3-8B's, bf16), run here on a CPU: every kernel but the CPU's fp32 one, and the
    bf16 cache's bytes read a second way, as the 4-byte words the roof's read sums. The K/V's bytes are counted
    from the shape (2 caches x 8 kv_heads x 64 positions x 128 x 2 bytes x 1 layer = 262,144 bytes)."""
    from benchmarks import decode_attention

    assert decode_attention.main(["--shape", "llama-3-8b", "--context", "64", "--layers", "1", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "flash_decode.cpp left out: the kernel reads an fp32 cache; this one is bfloat16" in out
    assert "1 layers × 64 positions × 8 kv_heads of 128, bfloat16 (0.3 MB of K/V)" in out
    for name in ("plain sum of the same K/V", "summed as 4-byte words", "SDPA, enable_gqa", "grouped as rows",
                 "a matrix-vector product over the words"):
        assert name in out
