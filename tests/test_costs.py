"""What a pass costs, counted as an inference engineer counts it: each number below is worked out by hand in the
test (the published figures multiplied out), never read back from the function it checks.

    MLA (DeepSeek-V3)     the latent it caches, and the MHA it is compared with, at its real head widths
    lookup tables         GPT-2's position table and an untied input embedding: one row a token, not the table
    experts               a mixture of experts costed at its active parameters
    a datacenter roof     predicted in its own dtype (bf16), never in the fp32 this CPU ran
    batched decode        about B FLOP/byte in bf16, and the batch that reaches a ridge
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from commands.main import main as cli_main
from engine.forward import estimates
from engine.forward.spec import from_config
from physics import batched, kvcalc, roofline


def kv_size(*args) -> tuple[str, int]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli_main(["kv-size", *args])
    return out.getvalue(), rc


# ---------------------------------------------------------------- MLA: DeepSeek-V3's real head widths


def test_deepseek_v3_kv_size_reports_its_latent_and_its_mha_at_the_real_head_widths():
    """MLA keeps kv_lora_rank 512 + qk_rope 64 = 576 elements per position per layer; as MHA every one of the 128
    heads would keep a K of qk_nope 128 + qk_rope 64 = 192 and a V of 128 (not d_model / heads = 56)."""
    text, rc = kv_size("--model", "DeepSeek-V3", "--tokens", "1", "--json")
    doc = json.loads(text)
    assert rc == 0
    assert doc["bytes"] == (512 + 64) * 2 * 61 == 70_272
    assert doc["as_mha"]["bytes"] == 128 * ((128 + 64) + 128) * 2 * 61 == 4_997_120
    assert (doc["k_head_dim"], doc["v_head_dim"], doc["mla_dim"]) == (192, 128, 576)
    assert doc["as_mha"]["bytes"] / doc["bytes"] == pytest.approx(71.1, abs=0.05)  # not x24.9
    text, _ = kv_size("--model", "DeepSeek-V3", "--tokens", "8192")
    assert "as MHA (128 heads x (K 192 + V 128))" in text and "x71.1" in text


def test_a_deepseek_config_gives_the_same_widths_as_the_table():
    """transformers' DeepseekV3Config (its defaults are V3's figures) sets head_dim = qk_rope_head_dim = 64: the spec
    reads qk_nope + qk_rope and v_head_dim instead."""
    from transformers import DeepseekV3Config

    config = DeepseekV3Config()
    assert config.head_dim == 64  # the trap
    spec = from_config(config, "DeepSeek-V3 config", 671e9)
    table = kvcalc.from_table("DeepSeek-V3")
    for a in (spec, table):
        assert (a.k_dim, a.v_dim, a.mla_dim, a.attention) == (192, 128, 576, "MLA")
        assert a.as_mha().kv_bytes_per_token(2) == 4_997_120 and a.kv_bytes_per_token(2) == 70_272


def test_the_table_names_its_mla_fields_and_they_add_up():
    import pandas as pd

    from engine.paths import ASSETS

    row = pd.read_csv(ASSETS / "model_configs.csv").set_index("name").loc["DeepSeek-V3"]  # the table's own columns
    assert row["mla_kv_dim"] == row["kv_lora_rank"] + row["qk_rope_head_dim"] == 512 + 64
    assert (row["qk_nope_head_dim"], row["v_head_dim"]) == (128, 128)


# ---------------------------------------------------------------- lookup tables: a row a token


def test_llama_3_8b_decode_reads_one_row_of_its_untied_embedding_not_1_05_gb():
    """Llama-3-8B: 8.0 B parameters, an untied 128,256 x 4,096 input embedding (525,336,576 parameters: 1.05 GB in
    bf16). A decode step reads every matmul weight once (the LM head included) and ONE 4,096-wide row of it."""
    a = kvcalc.from_table("Llama-3-8B")
    embedding = 128_256 * 4_096
    assert embedding == 525_336_576
    weights = (8.0e9 - embedding + 4_096) * 2  # bf16
    kv_written = 2 * 8 * 128 * 2 * 32  # the new position's K and V, 8 KV heads x 128, 32 layers
    assert estimates.step_bytes(a, 1, 0, 2.0) == pytest.approx(weights + kv_written, rel=1e-12)
    old = 8.0e9 * 2 + kv_written  # every parameter read, the whole table among them
    assert old - estimates.step_bytes(a, 1, 0, 2.0) == pytest.approx((embedding - 4_096) * 2, rel=1e-9)  # 1.05 GB
    # FLOPs: the body multiplies by neither embedding matrix; the LM head row is counted apart
    body = 8.0e9 - 2 * embedding
    assert estimates.step_flops(a, 1, 0) == pytest.approx(2 * body + 2 * 32 * (128 + 128) * 1 * 32 + 2 * 4096 * 128_256)


def test_gpt2s_position_table_is_looked_up_not_multiplied():
    """GPT-2 (124 M, tied): its 1,024 x 768 position table (786,432 parameters) is neither a matmul weight nor read
    whole: a decode step reads one row of it. Its token embedding is the LM head too, so that one is read in full."""
    a = kvcalc.from_table("gpt2")
    table = 1024 * 768
    assert a.position_table == table == 786_432
    weights = 124e6 - table + 768
    kv = 2 * 12 * 64 * 2 * (10 + 1) * 12  # fp16 K and V: 10 cached positions read, 1 written, 12 layers
    assert estimates.step_bytes(a, 1, 10, 2.0) == pytest.approx(weights * 2 + kv, rel=1e-12)
    body = 124e6 - table - 50_257 * 768
    pairs = 11  # the one query sees 10 cached keys and its own
    assert estimates.step_flops(a, 1, 10) == pytest.approx(2 * body + 2 * 12 * (64 + 64) * pairs * 12
                                                           + 2 * 768 * 50_257)


def test_the_live_gpt2s_spec_names_its_own_position_table(bundled_gpt2):
    """The bundled GPT-2's spec counts the position table its module really has (wpe: 512 x 256)."""
    wpe = bundled_gpt2.model.transformer.wpe.weight
    assert bundled_gpt2.spec.position_table == wpe.numel() == 512 * 256
    p = bundled_gpt2.spec.parameters
    assert estimates.weights_read(bundled_gpt2.spec, 1) == p - 512 * 256 + 256  # one row of 256
    assert estimates.weights_read(bundled_gpt2.spec, 40) == p - 512 * 256 + 40 * 256  # a 40-token prefill: 40 rows


# ---------------------------------------------------------------- mixtures of experts: active parameters


def test_mixtral_is_costed_at_its_active_parameters():
    """Mixtral-8x7B: 46.7 B parameters, 12.9 B active (2 of 8 experts a token, Mistral AI). A one-token step reads
    the active ones (less the untied 32,000 x 4,096 embedding, plus its one row); a long prefill nearly all."""
    a = kvcalc.from_table("Mixtral-8x7B")
    embedding = 32_000 * 4_096
    assert estimates.weights_read(a, 1) == pytest.approx(12.9e9 - embedding + 4_096, rel=1e-9)
    assert estimates.step_flops(a, 1, 0) == pytest.approx(2 * (12.9e9 - 2 * embedding) + 2 * 32 * 256 * 1 * 32
                                                          + 2 * 4_096 * 32_000, rel=1e-9)
    assert 46.7e9 / estimates.weights_read(a, 1) > 3.6  # what counting every parameter overstated
    # a 512-token prefill routes tokens to every expert: (1 - 2/8)^512 of them is missed, i.e. none
    assert estimates.weights_read(a, 512) == pytest.approx(46.7e9 - embedding + 512 * 4_096, rel=1e-9)


def test_a_mixtral_config_estimates_its_active_parameters():
    """From the config alone: each of 32 layers leaves 6 of 8 experts, gated MLPs of 3 x 4,096 x 14,336, unused."""
    from transformers import MixtralConfig

    config = MixtralConfig(vocab_size=32_000, hidden_size=4_096, intermediate_size=14_336, num_hidden_layers=32,
                           num_attention_heads=32, num_key_value_heads=8, num_local_experts=8, num_experts_per_tok=2)
    spec = from_config(config, "Mixtral-8x7B", 46.7e9)
    assert (spec.experts, spec.experts_per_token) == (8, 2)
    assert spec.active_parameters == pytest.approx(46.7e9 - 32 * 6 * 3 * 4_096 * 14_336)
    assert spec.active_parameters == pytest.approx(12.9e9, rel=0.01)  # Mistral AI's figure


# ---------------------------------------------------------------- a datacenter roof: predicted in bf16


def test_a_400_token_prefill_is_predicted_on_the_compute_side_of_an_h100_in_bf16(bundled_lm):
    """The bundled model (4,065,536 parameters, tied, 4 layers, 8 heads / 2 KV heads of 32, vocab 4,096, d 256):
    a 400-token prefill does the same FLOPs in any dtype; in bf16 it moves half the bytes of fp32, so its intensity
    doubles from ~161 (the memory side of an H100's ridge of 989e12 / 3.35e12 = 295) to ~321 (the compute side)."""
    s = bundled_lm.spec
    assert (s.parameters, s.layers, s.heads, s.kv_heads, s.head_dim, s.vocab, s.d_model) == \
        (4_065_536, 4, 8, 2, 32, 4096, 256)
    flops = 2 * (4_065_536 - 4096 * 256) * 400 + 2 * 8 * (32 + 32) * (400 * 401 // 2) * 4 + 2 * 256 * 4096
    kv_written = 2 * 2 * 32 * 400 * 4  # K and V, 2 KV heads of 32, 400 positions, 4 layers (elements)
    bf16, fp32 = flops / ((4_065_536 + kv_written) * 2), flops / ((4_065_536 + kv_written) * 4)
    assert bf16 == pytest.approx(321.3, abs=0.05) and fp32 == pytest.approx(160.65, abs=0.05)
    h100 = roofline.h100()
    assert (h100.elem_bytes, h100.dtype) == (2.0, "bf16") and h100.ridge == pytest.approx(989 / 3.35)
    p = roofline.predict(s, 400, 0, h100)
    assert p.intensity == pytest.approx(bf16) and p.side == "the compute side" and p.dtype == "bf16"
    assert p.label.startswith("predicted: the compute side") and "bf16" in p.label
    assert estimates.intensity(s, 400, 0, 4.0) == pytest.approx(fp32)  # what the CPU trace says, in fp32
    assert roofline.side(fp32, h100) == "the memory side"  # the old, wrong-dtype answer


def test_the_ridge_in_tokens_and_the_cache_off_rule():
    """A pass reading its weights once over n tokens does 2 FLOPs per weight per token over elem bytes per weight:
    the ridge in tokens is ridge x elem / 2. A cache-off step then costs about max(1, n / ridge_tokens) cached steps,
    and a decode step is about min(s, ridge_tokens) times dearer per token than an s-token prefill."""
    h100 = roofline.h100()
    assert h100.ridge_tokens == pytest.approx(989e12 / 3.35e12 * 2 / 2)  # ~295 tokens in bf16
    cpu = roofline.DeviceRoof("cpu", peak_flops=2e11, bandwidth=2e10, measured=True)  # fp32, ridge 10 FLOP/byte
    assert cpu.ridge_tokens == pytest.approx(10 * 4 / 2)
    assert roofline.cache_off_steps(100, h100.ridge_tokens) == 1.0  # below the ridge: the cache saves no time
    assert roofline.cache_off_steps(1180, h100.ridge_tokens) == pytest.approx(1180 / 295.22, rel=1e-3)
    assert roofline.cache_off_steps(100, cpu.ridge_tokens) == 100 / 20
    assert roofline.decode_prefill_gap(128, h100.ridge_tokens) == 128  # both memory-bound: the whole x128
    assert roofline.decode_prefill_gap(128, cpu.ridge_tokens) == 20


# ---------------------------------------------------------------- batched decode on the roofline


def test_batched_decode_is_about_b_flop_per_byte_in_bf16():
    """Llama-3-8B, B requests at 512 positions each, one token each: the weights are read once for all of them."""
    a = kvcalc.from_table("Llama-3-8B")
    embedding = 128_256 * 4_096
    per_token_flops = 2 * (8.0e9 - 2 * embedding) + 2 * 32 * 256 * 513 * 32 + 2 * 4_096 * 128_256
    for b in (1, 8, 64):
        weights = (8.0e9 - embedding + b * 4_096) * 2
        kv = b * 2 * 8 * 128 * 2 * 513 * 32  # each request reads its 512 cached positions and writes 1
        got = batched.batched_decode(a, b, 512, 2.0)
        assert got.flops == pytest.approx(b * per_token_flops, rel=1e-12)
        assert got.bytes == pytest.approx(weights + kv, rel=1e-12)
        assert got.intensity == pytest.approx(b * per_token_flops / (weights + kv), rel=1e-12)
    short = [batched.batched_decode(a, b, 1, 2.0).intensity / b for b in (1, 4, 16)]
    assert all(0.95 < r < 1.05 for r in short)  # about B at a short context


def test_the_batch_that_reaches_a_ridge_and_the_context_where_none_does():
    """B x F / (W + B x K) >= ridge  <=>  B >= ridge x W / (F - ridge x K): F a token's FLOPs, W the weight bytes,
    K a request's K/V bytes (Llama-3-8B, bf16, an H100's ridge of 295, at 64 positions)."""
    a = kvcalc.from_table("Llama-3-8B")
    embedding = 128_256 * 4_096
    ridge = 989e12 / 3.35e12
    f = 2 * (8.0e9 - 2 * embedding) + 2 * 32 * 256 * 65 * 32 + 2 * 4_096 * 128_256
    k = 2 * 8 * 128 * 2 * 65 * 32 + 4_096 * 2  # its K/V read and written, and its embedding row
    w = (8.0e9 - embedding) * 2
    import math

    want = math.ceil(ridge * w / (f - ridge * k))
    assert batched.saturating_batch(a, 64, 2.0, ridge) == want
    assert 300 < want < 400  # about the ridge, as the rule of thumb says
    # at 32k positions each request reads ~4.3 GB of K/V for ~31 GFLOP: no batch reaches 295
    assert batched.saturating_batch(a, 32_768, 2.0, ridge) is None


# ---------------------------------------------------------------- a context the model cannot read


def test_kv_size_says_gpt2_reads_at_most_1024_positions():
    text, rc = kv_size("--model", "gpt2", "--tokens", "8192")
    assert rc == 0 and "288.0 MiB" in text and "reads at most 1,024 positions" in text
    doc = json.loads(kv_size("--model", "gpt2", "--tokens", "8192", "--json")[0])
    assert doc["max_positions"] == 1024 and "1,024" in doc["note"]
    assert json.loads(kv_size("--model", "gpt2", "--tokens", "1024", "--json")[0])["note"] is None


@pytest.fixture(scope="module")
def bundled_gpt2():
    from engine.load.load import load_model

    return load_model("tinystories-gpt2", device="cpu")


def test_the_batch_roofline_is_predicted_on_the_h100_in_bf16():
    """Llama-3-8B on an H100 (989 TFLOP/s, 3.35 TB/s): at batch 1 a decode pass waits on reading ~15 GB of weights
    (~4.5 ms); at 512 requests of 64 positions it is past the ridge, compute-bound, and each token costs far less."""
    a = kvcalc.from_table("Llama-3-8B")
    points = roofline.batch_roofline(a, 64, roofline.h100())
    one, big = points[0], points[-1]
    assert one.batch == 1 and one.side == "the memory side"
    embedding = 128_256 * 4_096
    assert one.predicted_ms == pytest.approx(((8.0e9 - embedding + 4_096) * 2 + 2 * 8 * 128 * 2 * 65 * 32)
                                                / 3.35e12 * 1e3, rel=1e-9)
    assert big.batch == 512 and big.side == "the compute side" and big.attainable == 989e12
    assert big.ms_per_token < one.ms_per_token / 100
