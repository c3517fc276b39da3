"""The two drafters of speculative decoding: who guesses the next k tokens, and what the guesses cost.

    DraftModel    a small model sharing the target's tokenizer: k passes [batch, 1] on its own cache
    PromptLookup  no model: copy what followed an earlier occurrence of the last n tokens

Both return a Proposal: the guessed ids and, per guess, the distribution it was drawn from (one-hot for
prompt lookup and for greedy drafting), which the judge (engine/generate/speculative.py) needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.errors import StepError
from engine.forward.cache import kv_length, new_cache, roll_back
from engine.forward.run import run_pass
from engine.forward.sampling import Chooser, one_hot
from engine.load.loaded import LoadedModel
from engine.timing import span

MAX_NGRAM = 16


@dataclass(frozen=True)
class Proposal:
    """A drafter's guesses for the next tokens, with the distribution each was drawn from."""

    ids: tuple[int, ...]
    q_rows: tuple[torch.Tensor, ...]  # per proposal, float64 [vocab] (one-hot for prompt lookup and greedy)
    pass_ms: tuple[float, ...]  # each draft pass (a draft model), or the one search (prompt lookup)


class DraftModel:
    """A small model that shares the target's tokenizer drafts k tokens, one pass each on its own cache.

    One run at a time: `prefill` starts a new cache (the Speculator calls it).
    """

    def __init__(self, lm: LoadedModel):
        self.lm = lm
        self.cache = None
        self.repeats = 1

    @property
    def name(self) -> str:
        return f"draft model {self.lm.spec.name}"

    @property
    def max_positions(self) -> int:
        return self.lm.spec.max_positions

    def check(self, target: LoadedModel) -> None:
        """Refuse a draft model whose tokens mean something else: its proposals would be nonsense to the target."""
        same = (self.lm.spec.vocab == target.spec.vocab
                and self.lm.tokenizer.get_vocab() == target.tokenizer.get_vocab())
        if not same:
            raise StepError(f"The draft model '{self.lm.spec.name}' does not share the tokenizer of "
                            f"'{target.spec.name}', so its token ids mean different text. Choose a draft model "
                            "trained with the target's tokenizer, or draft by prompt lookup.")

    def prefill(self, ids: torch.Tensor) -> tuple[float, ...]:
        """The draft model's own prefill over the prompt [batch, s]; returns its time (ms)."""
        self.cache = new_cache(self.lm.config)
        result = run_pass(self.lm, ids, self.cache, repeats=self.repeats)
        return (result.timing.forward_ms,)

    def propose(self, ids: torch.Tensor, k: int, chooser: Chooser) -> Proposal:
        """k passes: the first feeds what the cache lacks ([batch, 1], or [batch, 2] after a full
        acceptance), each later one feeds the previous proposal [batch, 1]."""
        context, proposed, q_rows, times = ids, [], [], []
        fed = ids[:, kv_length(self.cache):]
        for _ in range(k):
            result = run_pass(self.lm, fed, self.cache, repeats=self.repeats, trim=False)  # sync() crops, then trims
            q = chooser.distribution(context, result.logits[0, -1])
            token = chooser.draw(q)
            proposed.append(token)
            q_rows.append(q)
            times.append(result.timing.forward_ms)
            fed = torch.tensor([[token]])
            context = torch.cat([context, fed], dim=1)
        return Proposal(tuple(proposed), tuple(q_rows), tuple(times))

    def sync(self, ids: torch.Tensor) -> None:
        """Forget what the target did not keep: at most len(ids) - 1 positions stay (the newest is fed next)."""
        held = kv_length(self.cache)
        roll_back(self.cache, held - min(held, ids.shape[1] - 1))

    @property
    def cache_len(self) -> int | None:
        return kv_length(self.cache)

    def free(self) -> None:
        self.cache = None


class PromptLookup:
    """Drafts by copying: find the last n tokens earlier in the ids, propose what followed them there.

    No second model, so drafting costs a search, not a forward pass; it pays when the text repeats
    itself (names, code, quoting the prompt). The rules are transformers' PromptLookupCandidateGenerator's.
    """

    def __init__(self, max_ngram: int = 3, eos_token_id: int | None = None):
        if isinstance(max_ngram, bool) or not isinstance(max_ngram, int) or not 1 <= max_ngram <= MAX_NGRAM:
            raise StepError(f"The n-gram size for prompt lookup must be a whole number from 1 to {MAX_NGRAM} "
                            f"(got {max_ngram!r}).")
        self.max_ngram = max_ngram
        self.eos_token_id = eos_token_id
        self.vocab = 0
        self.max_positions = None
        self.repeats = 1  # nothing to repeat: a search is timed once

    @property
    def name(self) -> str:
        return f"prompt lookup (n-gram ≤ {self.max_ngram})"

    def check(self, target: LoadedModel) -> None:
        self.vocab = target.spec.vocab
        if self.eos_token_id is None:
            self.eos_token_id = target.tokenizer.eos_token_id

    def prefill(self, ids: torch.Tensor) -> tuple[float, ...]:
        return ()

    def propose(self, ids: torch.Tensor, k: int, chooser: Chooser) -> Proposal:
        with span() as looking:  # a lookup in a Python list: nothing on the device
            proposed = lookup(ids[0].tolist(), k, self.max_ngram, self.eos_token_id) if k else []
        return Proposal(tuple(proposed), tuple(one_hot(t, self.vocab) for t in proposed), (looking.ms,) if k else ())

    def sync(self, ids: torch.Tensor) -> None:
        pass

    @property
    def cache_len(self) -> int | None:
        return None

    def free(self) -> None:
        pass


def lookup(ids: list[int], k: int, max_ngram: int, eos_token_id: int | None = None) -> list[int]:
    """Up to k tokens that followed an earlier occurrence of the ids' last n tokens.

    transformers' PromptLookupCandidateGenerator, rule for rule: n from min(max_ngram, len - 1) down to 1;
    the leftmost occurrence whose continuation is not empty wins; the continuation stops at the end of the
    ids and just before an EOS token (even if that leaves nothing: then there is no proposal this round).
    """
    n_ids = len(ids)
    for n in range(min(max_ngram, n_ids - 1), 0, -1):
        tail = ids[-n:]
        for start in range(n_ids - n + 1):
            if ids[start:start + n] != tail:
                continue
            begin, end = start + n, min(start + n + k, n_ids)
            if begin < end:
                found = ids[begin:end]
                if eos_token_id is not None and eos_token_id in found:
                    found = found[:found.index(eos_token_id)]
                return found
    return []
