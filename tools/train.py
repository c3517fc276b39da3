"""Train the small bundled language models (`python -m tools.train`).

The app must show a *trained* model offline, so the project trains its own:
a byte-level BPE tokenizer (Hugging Face `tokenizers`) and a small causal LM
built from stock transformers classes (Llama with GQA, or GPT-2 with MHA).
The result is an ordinary Hugging Face folder that `AutoModelForCausalLM` and
`AutoTokenizer` load with nothing else, plus a model card with measured numbers.

Stories are separated by `<|endoftext|>`, which is also the BOS/EOS token.
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from engine.timing import now

EOS = "<|endoftext|>"


@dataclass
class TrainConfig:
    corpus: str
    out: str
    arch: str = "llama"  # "llama" (RoPE, GQA) or "gpt2" (learned positions, MHA)
    vocab_size: int = 4096
    d_model: int = 256
    layers: int = 4
    heads: int = 8
    kv_heads: int = 2  # llama only; gpt2 always has kv_heads == heads
    d_ff: int = 768
    context: int = 512
    seq_len: int = 256  # training window; positions up to `context` still exist
    batch: int = 16
    steps: int = 2000
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    dropout: float = 0.0
    holdout_stories: int = 128  # from the end of the training file, never trained on
    eval_every: int = 250
    eval_file: str | None = None  # measured once at the end: bits per byte
    seed: int = 0
    threads: int | None = None
    init_from: str | None = None  # continue training a saved model folder (its tokenizer is kept)
    tokenizer_from: str | None = None  # reuse this model folder's tokenizer (a draft model must share its target's)
    device: str = "cpu"  # "cuda" trains on a GPU; the saved weights are float32 on the CPU either way


# ---------------------------------------------------------------- data


class TrainError(ValueError):
    """Training cannot start: said in one line, before anything is written."""


class CorpusError(TrainError):
    """The corpus cannot train anything: missing, not text, or too little of it."""


MIN_STORIES = 10


def read_stories(path: str | Path) -> list[str]:
    """Stories of an `<|endoftext|>`-separated file, stripped, empties dropped."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"the corpus {path} is not a file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise CorpusError(f"the corpus {path} is not UTF-8 text") from None
    if "\x00" in text:
        raise CorpusError(f"the corpus {path} holds NUL bytes: it looks like a binary file, not text")
    return [s.strip() for s in text.split(EOS) if s.strip()]


def check_corpus(path: str | Path) -> list[str]:
    """The stories of a usable corpus, or CorpusError: checked before anything is written."""
    stories = read_stories(path)
    if len(stories) < MIN_STORIES:
        raise CorpusError(f"the corpus {path} holds {len(stories)} stories separated by {EOS}; "
                          f"training needs at least {MIN_STORIES}")
    return stories


def check_settings(cfg: TrainConfig) -> None:
    """Figures a model can be built from, folders that exist: TrainError before anything is written.

    The output folder is made only when the model is saved, so a run that fails leaves nothing behind;
    here it is checked that it can be made (not a file, under a folder that can be written).
    """
    whole = {"vocab_size": 258, "d_model": 1, "layers": 1, "heads": 1, "kv_heads": 1, "d_ff": 1, "context": 2,
             "seq_len": 1, "batch": 1, "steps": 1, "holdout_stories": 1, "eval_every": 1}
    for name, lo in whole.items():
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise TrainError(f"--{name.replace('_', '-')} must be a whole number >= {lo} (got {value!r})")
    if cfg.warmup < 0 or not cfg.lr > 0 or cfg.weight_decay < 0 or not 0 <= cfg.dropout < 1:
        raise TrainError("--warmup and --weight-decay must be >= 0, --lr > 0, and --dropout in [0, 1)")
    if cfg.arch not in ("llama", "gpt2"):
        raise TrainError(f"--arch must be llama or gpt2 (got {cfg.arch!r})")
    if cfg.d_model % cfg.heads or (cfg.arch == "llama" and cfg.heads % cfg.kv_heads):
        raise TrainError(f"--d-model ({cfg.d_model}) must divide by --heads ({cfg.heads}), and --heads by "
                         f"--kv-heads ({cfg.kv_heads})")
    if cfg.device not in ("cpu", "cuda") and not cfg.device.startswith("cuda:"):
        raise TrainError(f"--device must be cpu or cuda (got {cfg.device!r})")
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise TrainError("--device cuda was asked for, but no CUDA GPU is available")
    for name in ("init_from", "tokenizer_from"):
        folder = getattr(cfg, name)
        if folder and not (Path(folder) / "config.json" if name == "init_from" else Path(folder)).exists():
            raise TrainError(f"--{name.replace('_', '-')} {folder} is not a saved model folder")
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise TrainError(f"--out {out} is a file, not a folder")
    parent = next((p for p in [out, *out.parents] if p.exists()), Path("."))
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise TrainError(f"--out {out}: {parent} cannot be written")


def train_tokenizer(stories: list[str], vocab_size: int):
    """A byte-level BPE tokenizer wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(stories, trainer=trainer)
    eos_id = tok.token_to_id(EOS)
    # every encoded prompt starts with BOS, as every training story did
    tok.post_processor = processors.TemplateProcessing(
        single=f"{EOS} $A", pair=f"{EOS} $A {EOS} $B", special_tokens=[(EOS, eos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOS, eos_token=EOS, unk_token=EOS, pad_token=EOS
    )


def token_stream(tokenizer, stories: list[str]) -> torch.Tensor:
    """EOS story EOS story ... as one long 1-D tensor of ids: [pos]."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for enc in tokenizer(stories, add_special_tokens=False)["input_ids"]:
        ids.append(eos)
        ids.extend(enc)
    ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def random_batch(stream: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator):
    """`batch` random windows of `seq_len + 1` tokens: inputs and next-token targets."""
    starts = torch.randint(0, len(stream) - seq_len - 1, (batch,), generator=gen)
    windows = torch.stack([stream[s : s + seq_len + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]  # [batch, pos] each


# ---------------------------------------------------------------- model


def build_model(cfg: TrainConfig, tokenizer):
    """A fresh transformers model of the chosen architecture (no hand-written layers)."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    eos = tokenizer.eos_token_id
    common = dict(vocab_size=len(tokenizer), bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    if cfg.arch == "llama":
        config = LlamaConfig(
            hidden_size=cfg.d_model,
            intermediate_size=cfg.d_ff,
            num_hidden_layers=cfg.layers,
            num_attention_heads=cfg.heads,
            num_key_value_heads=cfg.kv_heads,
            max_position_embeddings=cfg.context,
            rope_theta=10000.0,
            attention_dropout=cfg.dropout,
            tie_word_embeddings=True,
            **common,
        )
        return LlamaForCausalLM(config)
    if cfg.arch == "gpt2":
        config = GPT2Config(
            n_embd=cfg.d_model,
            n_inner=cfg.d_ff,
            n_layer=cfg.layers,
            n_head=cfg.heads,
            n_positions=cfg.context,
            resid_pdrop=cfg.dropout,
            embd_pdrop=cfg.dropout,
            attn_pdrop=cfg.dropout,
            tie_word_embeddings=True,
            **common,
        )
        return GPT2LMHeadModel(config)
    raise ValueError(f"unknown arch {cfg.arch!r}: choose 'llama' or 'gpt2'")


# ---------------------------------------------------------------- measuring


@torch.no_grad()
def mean_loss(model, stream: torch.Tensor, seq_len: int, max_windows: int = 64) -> float:
    """Mean next-token cross-entropy (nats) over consecutive windows of a stream."""
    model.eval()
    losses = []
    for start in range(0, len(stream) - seq_len - 1, seq_len)[:max_windows]:
        w = stream[start : start + seq_len + 1].unsqueeze(0).to(model.device)
        logits = model(input_ids=w[:, :-1]).logits  # [batch, pos, vocab]
        losses.append(torch.nn.functional.cross_entropy(logits[0], w[0, 1:]).item())
    model.train()
    return sum(losses) / len(losses)


@torch.no_grad()
def bits_per_byte(model, tokenizer, stories: list[str]) -> dict:
    """Tokenizer-independent quality: total cross-entropy in bits / UTF-8 bytes.

    Each story is conditioned on the EOS/BOS token and every one of its tokens is
    counted. Stories longer than the context are scored with a sliding window
    (each token still predicted once, with as much left context as fits).
    """
    model.eval()
    ctx = model.config.max_position_embeddings  # GPT-2 maps this name to n_positions
    stride = ctx // 2
    eos = tokenizer.eos_token_id
    total_nats, total_bytes, total_tokens = 0.0, 0, 0
    for story in stories:
        ids = [eos] + tokenizer(story, add_special_tokens=False)["input_ids"]
        total_bytes += len(story.encode("utf-8"))
        total_tokens += len(ids) - 1
        scored_to = 1  # ids[:scored_to] have been predicted already (ids[0] is the condition)
        while scored_to < len(ids):
            end = min(len(ids), scored_to + (ctx - 1 if scored_to == 1 else stride))
            start = max(0, end - ctx)
            window = torch.tensor([ids[start:end]], device=model.device)
            logp = torch.log_softmax(model(input_ids=window).logits[0].float(), dim=-1)
            targets = window[0, 1:]
            nll = -logp[:-1].gather(1, targets[:, None])[:, 0]
            total_nats += nll[scored_to - start - 1 :].sum().item()
            scored_to = end
    model.train()
    return {
        "bits_per_byte": total_nats / math.log(2) / total_bytes,
        "loss_per_token": total_nats / total_tokens,
        "tokens": total_tokens,
        "bytes": total_bytes,
        "stories": len(stories),
    }


def greedy_sample(model, tokenizer, prompt: str, new_tokens: int = 60) -> str:
    ids = tokenizer(tokenizer.bos_token + prompt, return_tensors="pt", add_special_tokens=False).to(model.device)
    out = model.generate(**ids, max_new_tokens=new_tokens, do_sample=False)
    return tokenizer.decode(out[0, 1:], skip_special_tokens=True)


# ---------------------------------------------------------------- training


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to `min_lr_ratio * lr`."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def train(cfg: TrainConfig, log=print) -> dict:
    """Train tokenizer and model, save a Hugging Face folder with a model card."""
    from tqdm import tqdm
    from transformers import GenerationConfig

    check_settings(cfg)
    stories = check_corpus(cfg.corpus)  # before anything is written: a bad corpus leaves nothing behind
    if cfg.eval_file:
        check_corpus(cfg.eval_file)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = torch.device(cfg.device)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    out = Path(cfg.out)  # made only when the model is saved: a run that fails leaves no empty folder

    holdout_n = min(cfg.holdout_stories, max(1, len(stories) // 10))
    train_stories, held_stories = stories[:-holdout_n], stories[-holdout_n:]
    if cfg.init_from or cfg.tokenizer_from:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(cfg.init_from or cfg.tokenizer_from)
    else:
        tokenizer = train_tokenizer(train_stories, cfg.vocab_size)
    train_ids = token_stream(tokenizer, train_stories)
    held_ids = token_stream(tokenizer, held_stories)
    seq_len = min(cfg.seq_len, cfg.context, len(train_ids) - 2, len(held_ids) - 2)
    log(f"corpus: {len(train_stories)} train stories ({len(train_ids):,} tokens), "
        f"{len(held_stories)} held out ({len(held_ids):,} tokens); vocab {len(tokenizer)}")

    if cfg.init_from:
        model = AutoModelForCausalLM.from_pretrained(cfg.init_from, dtype=torch.float32, use_safetensors=True)
        log(f"continuing from {cfg.init_from}")
    else:
        model = build_model(cfg, tokenizer)
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {cfg.arch}, {n_params:,} parameters")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.95),
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    history = []
    t0 = now()
    model.train()
    bar = tqdm(range(cfg.steps), desc=f"train {cfg.arch}", mininterval=5)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        x, y = (t.to(device) for t in random_batch(train_ids, cfg.batch, seq_len, gen))
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tok_s = (step + 1) * cfg.batch * seq_len / (now() - t0)
        bar.set_postfix(loss=f"{loss.item():.3f}", tok_s=f"{tok_s:,.0f}")
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            held = mean_loss(model, held_ids, seq_len)
            history.append({"step": step + 1, "train_loss": round(loss.item(), 4), "heldout_loss": round(held, 4)})
            log(f"step {step + 1}: train loss {loss.item():.3f}, held-out loss {held:.3f}")
    train_seconds = now() - t0

    metrics = {"heldout_loss": history[-1]["heldout_loss"], "train_loss": history[-1]["train_loss"]}
    if cfg.eval_file:
        metrics["eval"] = bits_per_byte(model, tokenizer, read_stories(cfg.eval_file))
        log(f"eval bits per byte: {metrics['eval']['bits_per_byte']:.4f}")
    model.eval()
    samples = [greedy_sample(model, tokenizer, p) for p in ("Once upon a time", "One day, a little girl", "The dog")]

    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id, do_sample=False, max_length=cfg.context,
    )
    out.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(out, safe_serialization=True)
    tokenizer.model_max_length = cfg.context
    tokenizer.save_pretrained(out)
    earlier = []
    if cfg.init_from and (Path(cfg.init_from) / "training_report.json").exists():
        prev = json.loads((Path(cfg.init_from) / "training_report.json").read_text())
        earlier = prev.get("earlier_stages", []) + [
            {k: prev[k] for k in ("tokens_seen", "train_seconds", "hardware", "history")}
            | {"steps": prev["config"]["steps"], "lr": prev["config"]["lr"]}
        ]
    report = {
        "config": asdict(cfg),
        "earlier_stages": earlier,
        "parameters": n_params,
        "tokens_seen": cfg.steps * cfg.batch * seq_len,
        "train_seconds": round(train_seconds, 1),
        "hardware": _hardware(device),
        "history": history,
        "metrics": metrics,
        "samples": samples,
    }
    (out / "training_report.json").write_text(json.dumps(report, indent=2))
    (out / "README.md").write_text(model_card(report, len(tokenizer)))
    return report


def _hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} CPU threads, torch {torch.__version__}"


def model_card(report: dict, vocab: int) -> str:
    cfg = report["config"]
    m = report["metrics"]
    if cfg["arch"] == "gpt2" or cfg["kv_heads"] == cfg["heads"]:
        attention = "multi-head (MHA)"
    elif cfg["kv_heads"] == 1:
        attention = f"multi-query (MQA): {cfg['heads']} query heads share one KV head"
    else:
        attention = f"grouped-query (GQA): {cfg['heads']} query heads share {cfg['kv_heads']} KV heads"
    shared = (f"; shared with `{Path(cfg['tokenizer_from']).name}` (taken from its folder, not trained again)"
              if cfg.get("tokenizer_from") else "")
    eval_line = "not measured"
    if "eval" in m:
        e = m["eval"]
        eval_line = (f"**{e['bits_per_byte']:.4f} bits per byte** ({e['loss_per_token']:.4f} nats per token, "
                     f"{e['tokens']:,} tokens, {e['bytes']:,} bytes, {e['stories']} stories)")
    samples = "\n".join(f"{i + 1}. {s!r}" for i, s in enumerate(report["samples"]))
    history = "\n".join(f"| {h['step']} | {h['train_loss']} | {h['heldout_loss']} |" for h in report["history"])
    earlier = "".join(
        f"- earlier stage {i + 1}: {st['steps']} steps at peak lr {st['lr']}, {st['tokens_seen']:,} tokens, "
        f"{st['train_seconds']:.0f} s on {st['hardware']}; final held-out loss {st['history'][-1]['heldout_loss']}\n"
        for i, st in enumerate(report.get("earlier_stages", []))
    )
    if earlier:
        earlier += "- then continued from those weights (same tokenizer) for the stage below\n"
    return f"""# Decode Lab bundled model: {Path(cfg['out']).name}

A small causal language model trained by `python -m tools.train` for the Decode Lab
teaching app. It writes simple children's stories; it knows nothing else.

## Data and license
Trained on `tinystories_subset.txt` (TinyStories by Ronen Eldan and Yuanzhi Li, 2023,
arXiv:2305.07759), license **CDLA-Sharing-1.0**; these weights are derived from that data and
are shared under the same license. The last {cfg['holdout_stories']} stories of the training file were
held out for the held-out loss. Bits per byte are measured on `tinystories_eval.txt`, 300
stories that were never trained or tuned on.

## Architecture
- transformers class: `{'LlamaForCausalLM' if cfg['arch'] == 'llama' else 'GPT2LMHeadModel'}`
- attention: {attention}; positions: {'RoPE' if cfg['arch'] == 'llama' else 'learned'}
- layers {cfg['layers']}, d_model {cfg['d_model']}, head_dim {cfg['d_model'] // cfg['heads']}, d_ff {cfg['d_ff']}, context {cfg['context']} positions
- parameters: {report['parameters']:,} (input and output embeddings tied)
- tokenizer: byte-level BPE, {vocab} tokens; `{EOS}` is BOS, EOS and padding{shared}

## Training
{earlier}- steps {cfg['steps']}, batch {cfg['batch']} x {cfg['seq_len']} tokens, {report['tokens_seen']:,} tokens seen
- AdamW (betas 0.9/0.95, weight decay {cfg['weight_decay']}), peak lr {cfg['lr']}, {cfg['warmup']} warm-up steps, cosine to {cfg['min_lr_ratio']} x peak, dropout {cfg['dropout']}, seed {cfg['seed']}
- time {report['train_seconds']:.0f} s on {report['hardware']}

| step | train loss | held-out loss |
|---|---|---|
{history}

## Quality (measured)
- held-out eval: {eval_line}

## Greedy samples
{samples}
"""


def build_parser():
    import argparse

    t = argparse.ArgumentParser(prog="python -m tools.train", description="train a small bundled model and its tokenizer")
    t.add_argument("--corpus", required=True, help="text file, stories separated by <|endoftext|>")
    t.add_argument("--out", required=True, help="output folder (a Hugging Face model folder)")
    t.add_argument("--arch", choices=["llama", "gpt2"])
    t.add_argument("--eval-file", dest="eval_file", help="held-out file for bits per byte (never trained on)")
    t.add_argument("--init-from", dest="init_from", help="continue training this saved model folder")
    t.add_argument("--tokenizer-from", dest="tokenizer_from",
                   help="reuse this model folder's tokenizer (a draft model must share its target's)")
    t.add_argument("--device", default=None, help="cpu (default) or cuda")
    for name, typ in [("vocab-size", int), ("d-model", int), ("layers", int), ("heads", int), ("kv-heads", int),
                      ("d-ff", int), ("context", int), ("seq-len", int), ("batch", int), ("steps", int),
                      ("lr", float), ("warmup", int), ("weight-decay", float), ("dropout", float),
                      ("holdout-stories", int), ("eval-every", int), ("seed", int), ("threads", int)]:
        t.add_argument(f"--{name}", dest=name.replace("-", "_"), type=typ)
    return t


def main(argv: list[str] | None = None) -> int:
    """`python -m tools.train ...`: every refusal is one line on stderr and exit status 2, nothing created."""
    import sys

    args = build_parser().parse_args(argv)
    fields = {k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__ and v is not None}
    try:
        train(TrainConfig(**fields))
    except TrainError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
