"""Batches: several prompts in one forward pass, padded on the left to one length.

    prompts of different lengths      ->  input_ids [batch, pos], attention_mask [batch, pos]
    PAD PAD  A  B  C                       0   0   1  1  1
     D   E   F  G  H                       1   1   1  1  1

Why the left: every row's last position is then a real token, so the next-token
logits of all rows sit in the same column, and each decode step appends one column
to every row at once. The attention mask (0 = padding) keeps every real query from
looking at a padded key, and position ids count only real tokens, so each row sees
exactly what it would see alone.

Every row is a Sequence of the one generation loop (engine/generate/loop.py): it chooses its token with its
own chooser and stops by its own stop rule (end-of-text, `new_tokens`, a stop string), exactly as a Stepper
would. The batch runs until every row has stopped, and a row that stopped early still takes its column in
every later pass, its output thrown away: that is static batching's waste, which continuous batching
(engine/generate/serving/) removes by letting a finished request leave and a waiting one take its place.

The padding is written out here rather than asked of the tokenizer: the tokenizer
is shared by every session of the server, so its `padding_side` is not ours to flip.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.errors import StepError
from engine.forward.cache import new_cache
from engine.forward.run import run_pass
from engine.forward.sampling import Sampling
from engine.generate.loop import Sequence, token_pieces
from engine.load.loaded import LoadedModel

MAX_BATCH = 4


@dataclass(frozen=True)
class BatchRun:
    """A batch run: the padded prefill, then decode steps for all rows at once, until every row has stopped."""

    prompts: tuple[str, ...]
    input_ids: torch.Tensor  # [batch, pos] the padded prompt ids
    attention_mask: torch.Tensor  # [batch, pos] 1 = real token, 0 = padding
    pieces: tuple[tuple[str, ...], ...]  # per row, the text of each padded prompt position ("" for padding)
    prefill_attention: torch.Tensor  # [layer, batch, head, pos, pos] float32 on the CPU
    generated: tuple[tuple[int, ...], ...]  # per row, its tokens (prefill's choice first), up to where it stopped
    texts: tuple[str, ...]  # per row, prompt + generated text
    shapes: tuple[tuple[str, tuple[int, ...]], ...]  # (tensor, shape) of the prefill and of one decode step
    stop_reasons: tuple[str, ...]  # per row, why it stopped (the loop's stop rule)
    new_tokens: int  # the rule every row ran under: at most this many new tokens,
    sampling: Sampling  # chosen this way,
    stop_strings: tuple[str, ...]  # stopping early at one of these,
    stop_on_eos: bool  # or at end-of-text

    @property
    def pad_counts(self) -> list[int]:
        return [int((row == 0).sum()) for row in self.attention_mask]

    def max_attention_on_padding(self) -> float:
        """Largest weight any real query row gives any padded key, over all layers and heads (should be 0)."""
        worst = 0.0
        for b, pads in enumerate(self.pad_counts):
            if pads:
                worst = max(worst, float(self.prefill_attention[:, b, :, pads:, :pads].max()))
        return worst


def left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists of different lengths -> (input_ids, attention_mask), both [batch, pos], padded on the left."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (width - len(r)) + r for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return ids, mask


def run_batch(lm: LoadedModel, prompts: list[str], new_tokens: int = 9, max_batch: int = MAX_BATCH,
              record: bool = True, *, sampling: Sampling | None = None, stop_strings: tuple[str, ...] | list[str] = (),
              stop_on_eos: bool = True) -> BatchRun:
    """Prefill all prompts in one padded pass, then decode every row together until each has stopped.

    Each row is a Sequence: the prefill chooses its first new token; every decode step after it adds one
    column to all rows, and each row stops by the loop's stop rule (at most `new_tokens` new tokens).
    record=False keeps no attention and no shapes (static batching timed against a serving run).
    """
    if not 2 <= len(prompts) <= max_batch:
        raise StepError(f"A batch here has 2 to {max_batch} prompts (got {len(prompts)}).")
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 1:
        raise StepError(f"New tokens must be a whole number of at least 1 (got {new_tokens!r}).")
    seqs = [Sequence(lm, p, sampling=sampling, max_new_tokens=new_tokens, stop_strings=stop_strings,
                     stop_on_eos=stop_on_eos) for p in prompts]
    rows = [list(s.tokens) for s in seqs]  # the prompts' ids
    if max(len(r) for r in rows) + new_tokens > lm.spec.max_positions:
        raise StepError(f"The longest prompt plus {new_tokens} new tokens does not fit in "
                        f"{lm.spec.max_positions} positions. Shorten it.")
    tok = lm.tokenizer
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids, mask = left_pad(rows, pad_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # real tokens count 0, 1, 2, ...; padding sits at 0
    cache = new_cache(lm.config)
    first = run_pass(lm, ids, cache, record=record, attention_mask=mask, position_ids=positions)
    attention = torch.stack([a.float().cpu() for a in first.patterns()]) if record else torch.zeros(0)
    shapes = [("prefill input_ids", tuple(ids.shape)), ("prefill attention_mask", tuple(mask.shape)),
              ("prefill hidden states", first.hidden_shape),
              ("prefill attention (each layer)", tuple(attention.shape[1:]))] if record else []
    choose_and_append(seqs, first.logits[:, -1])  # every row's last column is a real token
    step_mask, last_pos, step = mask, positions[:, -1:], 0
    while not all(s.done for s in seqs):  # each decode step adds one column to every row
        step_mask = torch.cat([step_mask, torch.ones(len(rows), 1, dtype=torch.long)], dim=1)  # [batch, kv_len]
        last_pos, step = last_pos + 1, step + 1
        shown = record and step == 1  # only the first decode step's shapes are shown: skip the extras after it
        fed = torch.tensor([[s.tokens[-1]] for s in seqs])  # [batch, 1]: each row's newest token
        out = run_pass(lm, fed, cache, record=shown, attention_mask=step_mask, position_ids=last_pos)
        if shown:
            shapes += [("decode input_ids", tuple(fed.shape)), ("decode attention_mask", tuple(step_mask.shape)),
                       ("decode hidden states", out.hidden_shape),
                       ("decode attention (each layer)", tuple(out.patterns()[0].shape))]
        choose_and_append(seqs, out.logits[:, -1])
    pieces = tuple(tuple([""] * (ids.shape[1] - len(r)) + token_pieces(tok, r)) for r in rows) if record else ()
    return BatchRun(
        prompts=tuple(prompts), input_ids=ids, attention_mask=mask, pieces=pieces, prefill_attention=attention,
        generated=tuple(tuple(s.generated_ids) for s in seqs), texts=tuple(s.text for s in seqs),
        shapes=tuple(shapes), stop_reasons=tuple(s.stop_reason for s in seqs), new_tokens=new_tokens,
        sampling=seqs[0].sampling, stop_strings=seqs[0].stop_strings, stop_on_eos=stop_on_eos,
    )


def choose_and_append(seqs: list[Sequence], logits: torch.Tensor) -> None:
    """logits [batch, vocab]: each row still running chooses its token and appends it through the stop rule.
    A row that has stopped ignores its row of logits: its column was computed for nothing."""
    for seq, row in zip(seqs, logits.float().cpu()):  # one copy off the device for the whole batch
        if not seq.done:
            seq.append(seq.choose(row, probs=False).token_id)


def same_as_alone(lm: LoadedModel, run: BatchRun) -> list[bool]:
    """Per row: are its tokens exactly those of the same prompt decoded alone (a Stepper, the same stop rule)?"""
    from engine.generate.stepper import Stepper

    out = []
    for prompt, tokens in zip(run.prompts, run.generated):
        alone = Stepper(lm, prompt, sampling=run.sampling, max_new_tokens=run.new_tokens,
                        stop_strings=run.stop_strings, stop_on_eos=run.stop_on_eos, record=False, repeats=1)
        alone.run()
        out.append(list(tokens) == alone.generated_ids)
    return out
