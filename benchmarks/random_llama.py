"""A Llama-shaped model with random weights, for timing on a GPU (`python -m benchmarks.random_llama`).

Timing a forward pass does not need trained weights, only the right shapes: these folders load like
any other model (safetensors, the bundled tokenizer, which uses only the first 4,096 of the 32,000 ids).

    python -m benchmarks.random_llama --size 124m --out /tmp/llama-124m
    python -m engine bench --model /tmp/llama-124m --lengths 512 2048 --no-app
"""

from __future__ import annotations

import argparse
from pathlib import Path

SIZES = {  # ~124 M (SmolLM-like width, 12 layers) and ~1.1 B (TinyLlama's shape)
    "124m": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=4),
    "1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
               num_key_value_heads=4),
}


def build(size: str, out: str, seed: int = 0) -> int:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(Path(__file__).resolve().parent.parent / "assets" / "models" / "tinystories-llama")
    config = LlamaConfig(vocab_size=32000, max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
                         **SIZES[size])
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size", choices=sorted(SIZES), required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    print(f"{args.size}: {build(args.size, args.out):,} parameters saved to {args.out}")
