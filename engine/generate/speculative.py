"""Speculative decoding, one round at a time: a cheap drafter guesses, the target checks every guess in one pass.

    prefill:  target  input_ids [batch, s]    every prompt position, fills its cache -> the first token
              (a draft model prefills its own cache on the same prompt)
    round:    draft   k proposals             a draft model: k passes [batch, 1] on its own cache;
                                              prompt lookup: an n-gram search of the ids so far, no model
              verify  input_ids [batch, k+1]  the newest token + the k proposals, ONE target pass on its
                                              cache, logits_to_keep = k+1: row i scores the token after fed row i
              judge   keep the longest prefix of proposals the target agrees with, then one token of the
                      target's own (the correction at the first disagreement, or the bonus after all k)
              crop    roll both caches back to what was kept (engine.forward.cache.roll_back)

Which positions a cache holds (checked after every round by tests/test_speculative.py):

    target cache  every position of `ids` except the newest token (chosen, not fed yet):
                  kv_length == len(ids) - 1 == prompt_len + generated - 1
    draft cache   a prefix of the same positions: len(ids) - 1, or len(ids) - 2 after a round that
                  accepted all k (the last proposal was never fed to the draft model; it is fed, with
                  the bonus token, by the next round's first draft pass)

Why the output is the target's own. Greedy: a proposal is kept only if it *is* the target's argmax at that
position, so every kept token and the correction are exactly what plain greedy decoding would pick.
Sampling: a proposal x drawn from the drafter's q is kept with probability min(1, p(x)/q(x)); at the first
rejection the token is drawn from the residual max(0, p - q), normalised. Then P(out = x) = p(x) for every x
(Leviathan et al. 2023, Chen et al. 2023), whatever q is. Greedy is the same rule with one-hot p and q,
so `judge` below is the one function both use. Prompt lookup has a one-hot q.

The target's pass is `engine.forward.run_pass`, as for every other pass the engine makes.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from engine.forward.cache import kv_length, new_cache, roll_back
from engine.errors import StepError
from engine.forward.estimates import step_bytes, step_flops
from engine.forward.run import Pass, Timing, run_pass
from engine.load.load import LoadedModel
from engine.forward.sampling import Choice, Sampling
from engine.generate.stepper import (
    TIMED_REPEATS,
    Generation,
    Stepper,
    _check_max_new_tokens,
    encode_prompt,
    record_candidates,
    record_layers,
    rows_kept,
    token_pieces,
)
from engine.forward.trace import StepTrace

MAX_K = 16  # proposals per round: beyond this almost every round is cut early anyway
MAX_NGRAM = 16


# ---------------------------------------------------------------- the accept/resample rule


def accept_probability(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) for every token x [vocab]: the chance a proposal x drawn from q is kept.

    Where q(x) = 0 the drafter never proposes x; the value there is 1 and never used.
    """
    safe_q = torch.where(q > 0, q, torch.ones_like(q))
    return torch.where(q > 0, torch.clamp(p / safe_q, max=1.0), torch.ones_like(p))


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """What a rejection draws from [vocab]: max(0, p - q), normalised.

    Its mass is exactly the probability of a rejection, so drawing from it after a rejection tops p back up
    where q fell short. When p == q nothing is ever rejected; p itself is returned so the value stays finite.
    """
    r = torch.clamp(p - q, min=0.0)
    total = r.sum()
    return r / total if total > 0 else p


@dataclass(frozen=True)
class Judgement:
    """The verdict on one round's proposals."""

    accepted: int  # length of the kept prefix of proposals
    token_id: int  # the target's own token: the correction (accepted < proposed) or the bonus
    accept_probs: tuple[float, ...]  # min(1, p/q) of each proposal that was checked (1 or 0 when greedy)


class Chooser:
    """The Sampling settings, their LogitsProcessors and one seeded CPU generator, shared by drafter and judge."""

    def __init__(self, sampling: Sampling):
        self.sampling = sampling
        self.processors = sampling.processors()
        self.generator = torch.Generator().manual_seed(sampling.seed)

    def distribution(self, context_ids: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """What the Stepper would draw from after `context_ids` [batch=1, pos], as float64 [vocab].

        Greedy: one-hot at the argmax of the processed scores (the Stepper's exact rule). Sampling: the softmax
        of the scores after the processors (repetition penalty, temperature, top-k, top-p), as generate does.
        """
        scores = self.processors(context_ids.cpu(), logits.detach().float().cpu()[None, :].clone())[0]
        if self.sampling.is_greedy:
            return one_hot(int(torch.argmax(scores)), scores.numel())
        return torch.softmax(scores.double(), dim=-1)

    def draw(self, probs: torch.Tensor) -> int:
        """A token from probs [vocab]; a one-hot distribution is read, not drawn (greedy never uses the generator)."""
        top = int(torch.argmax(probs))
        if float(probs[top]) >= 1.0:
            return top
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def coin(self, chance: float) -> bool:
        """True with probability `chance`; no draw when it is 0 or 1."""
        if chance >= 1.0:
            return True
        if chance <= 0.0:
            return False
        return bool(torch.rand((), dtype=torch.float64, generator=self.generator) < chance)


def one_hot(token_id: int, vocab: int) -> torch.Tensor:
    out = torch.zeros(vocab, dtype=torch.float64)
    out[token_id] = 1.0
    return out


def judge(p_rows: list[torch.Tensor], q_rows: list[torch.Tensor], proposed: tuple[int, ...],
          chooser: Chooser) -> Judgement:
    """Walk the proposals in order: keep each with probability min(1, p/q); stop at the first rejection.

    p_rows: k+1 target distributions (row i: the token after fed row i); q_rows: k drafter distributions.
    """
    chances = []
    for i, token in enumerate(proposed):
        chance = float(accept_probability(p_rows[i], q_rows[i])[token])
        chances.append(chance)
        if not chooser.coin(chance):
            return Judgement(i, chooser.draw(residual(p_rows[i], q_rows[i])), tuple(chances))
    return Judgement(len(proposed), chooser.draw(p_rows[len(proposed)]), tuple(chances))


# ---------------------------------------------------------------- the two drafters


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
        t0 = time.perf_counter()
        proposed = lookup(ids[0].tolist(), k, self.max_ngram, self.eos_token_id) if k else []
        ms = (time.perf_counter() - t0) * 1e3
        return Proposal(tuple(proposed), tuple(one_hot(t, self.vocab) for t in proposed), (ms,) if k else ())

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


# ---------------------------------------------------------------- the record of a round


@dataclass(frozen=True)
class RoundTrace:
    """One round: the drafter's proposals, the target's one pass over them, the verdict and the crop.

    `target` is that pass recorded exactly as the Stepper records a step (layers, attention, shapes, timing),
    with phase "prefill" (round 0) or "verify"; its layers were read BEFORE the crop, so they show all
    q_len = k+1 columns the pass wrote. Positions from `rejected_from` on were written and then cut.
    """

    round: int  # 0 = the prefill
    drafter: str
    proposed_ids: tuple[int, ...]
    proposed_tokens: tuple[str, ...]
    outcomes: tuple[str, ...]  # per proposal: "accepted", "rejected", or "unchecked" (after a rejection)
    accept_probs: tuple[float, ...]  # min(1, p/q) of each checked proposal (1 or 0 when greedy)
    accepted: int
    token_kind: str  # the target's own token: "correction", "bonus", "plain" (nothing proposed), "prefill"
    new_ids: tuple[int, ...]  # appended this round: the accepted proposals + the target's token (cut at a stop)
    new_tokens: tuple[str, ...]
    cache_before: int  # target cache positions before the round
    cache_after_verify: int  # ... after the verify pass (cache_before + q_len)
    cache_after_crop: int  # ... after the crop: every position but the newest token
    draft_cache_after: int | None  # the draft model's cache after the round (None: prompt lookup)
    draft_ms: tuple[float, ...]  # each draft pass (or the lookup), measured
    target: StepTrace  # the target's one pass

    @property
    def phase(self) -> str:
        return self.target.phase

    @property
    def q_len(self) -> int:
        return self.target.q_len

    @property
    def kv_len(self) -> int:
        return self.target.kv_len

    @property
    def proposed(self) -> int:
        return len(self.proposed_ids)

    @property
    def checked(self) -> int:
        """Proposals the target judged: the accepted ones and the first rejected one (the rest go unread)."""
        return len(self.accept_probs)

    @property
    def token_id(self) -> int:
        return self.target.token_id

    @property
    def token(self) -> str:
        return self.target.token

    @property
    def verify_ms(self) -> float:
        return self.target.timing.forward_ms

    @property
    def cut(self) -> int:
        """Positions the verify pass wrote and the crop removed."""
        return self.cache_after_verify - self.cache_after_crop

    @property
    def rejected_from(self) -> int | None:
        """First fed position whose K/V was cut (for engine.draw.stage.stage_svg), None when nothing was."""
        return self.cache_after_crop if self.cut else None

    def to_dict(self, attention: bool = False) -> dict:
        return {
            "round": self.round, "phase": self.phase, "drafter": self.drafter,
            "proposed_ids": list(self.proposed_ids), "proposed_tokens": list(self.proposed_tokens),
            "outcomes": list(self.outcomes), "accept_probs": [round(x, 6) for x in self.accept_probs],
            "accepted": self.accepted, "token_id": self.token_id, "token": self.token, "token_kind": self.token_kind,
            "new_ids": list(self.new_ids), "new_tokens": list(self.new_tokens),
            "q_len": self.q_len, "kv_len": self.kv_len,
            "cache_before": self.cache_before, "cache_after_verify": self.cache_after_verify,
            "cache_after_crop": self.cache_after_crop, "cut": self.cut, "rejected_from": self.rejected_from,
            "draft_cache_after": self.draft_cache_after,
            "draft_ms": [round(x, 4) for x in self.draft_ms], "verify_ms": round(self.verify_ms, 4),
            "target_pass": self.target.to_dict(attention=attention),
        }


# ---------------------------------------------------------------- the run


class Speculator(Generation):
    """One speculative generation run on a shared target; owns its caches, ids and round records.

    `prefill()` once, then `round()` per draft-verify-crop round (a page can step it like the Stepper).
    """

    def __init__(self, target: LoadedModel, prompt: str, drafter: DraftModel | PromptLookup, k: int = 4,
                 sampling: Sampling | None = None, max_new_tokens: int = 32, record: bool = True,
                 stop_on_eos: bool = True, repeats: int | None = None):
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise StepError(f"Proposals per round (k) must be a whole number from 1 to {MAX_K} (got {k!r}).")
        self.lm = target
        self.drafter = drafter
        self.k = k
        self.sampling = sampling or Sampling()
        self.sampling.validate(target.spec.vocab)
        self.max_new_tokens = _check_max_new_tokens(max_new_tokens)
        self.record = record
        self.stop_on_eos = stop_on_eos
        self.repeats = (TIMED_REPEATS if record else 1) if repeats is None else max(1, int(repeats))
        drafter.check(target)
        drafter.repeats = self.repeats
        self.prompt = prompt
        self.ids = encode_prompt(target, prompt)  # [batch=1, pos]
        self.prompt_len = self.ids.shape[1]
        self.cache = None
        self.rounds: list[RoundTrace] = []
        self.stop_reason: str | None = None
        self.chooser = Chooser(self.sampling)

    # ------------------------------------------------------------ the two phases

    def prefill(self) -> RoundTrace:
        """Round 0: the target's prefill [batch, s] picks the first token; a draft model prefills its own cache."""
        if self.rounds:
            raise StepError("Prefill has already run for this prompt: press Reset to start again.")
        proposal = Proposal((), (), self.drafter.prefill(self.ids))
        self.cache = new_cache(self.lm.config)
        fed = self.ids  # [batch, s]
        result = run_pass(self.lm, fed, self.cache, record=self.record, repeats=self.repeats)
        t0 = time.perf_counter()
        p = self.chooser.distribution(self.ids, result.logits[0, -1])
        judged = Judgement(0, self.chooser.draw(p), ())
        sample_ms = (time.perf_counter() - t0) * 1e3
        return self._close(proposal, fed, result, 0, judged, p, sample_ms, "prefill")

    def round(self) -> RoundTrace:
        """Draft k tokens, verify them in one target pass, keep the agreeing prefix + the target's token, crop."""
        if not self.rounds:
            raise StepError("Run Prefill first: a round needs the prompt to have been processed.")
        if self.done:
            raise StepError(f"This run has finished ({self.stop_reason}): press Reset to start again.")
        proposal = self.draft()
        past = kv_length(self.cache)
        fed = torch.cat([self.ids[:, -1:], torch.tensor([proposal.ids], dtype=torch.long).view(1, -1)], dim=1)
        result = self.verify(fed)  # fed [batch, k+1]
        t0 = time.perf_counter()
        p_rows = [self.chooser.distribution(torch.cat([self.ids, fed[:, 1:i + 1]], dim=1), result.logits[0, i])
                  for i in range(fed.shape[1])]  # row i: the target's distribution after fed row i
        judged = judge(p_rows, list(proposal.q_rows), proposal.ids, self.chooser)
        sample_ms = (time.perf_counter() - t0) * 1e3
        kind = "plain" if not proposal.ids else ("bonus" if judged.accepted == len(proposal.ids) else "correction")
        return self._close(proposal, fed, result, past, judged, p_rows[judged.accepted], sample_ms, kind)

    def draft(self) -> Proposal:
        """The drafter's guesses: k of them, fewer near the end of the run (see _proposals_this_round)."""
        return self.drafter.propose(self.ids, self._proposals_this_round(), self.chooser)

    def verify(self, fed: torch.Tensor) -> Pass:
        """The target's one pass of a round: fed [batch, k+1] = the newest token + k proposals, on its cache.

        logits_to_keep = k+1: row i is the target's next-token logits after fed row i, so one pass checks every
        proposal and also supplies the token after the last one (the bonus).
        """
        return run_pass(self.lm, fed, self.cache, record=self.record, repeats=self.repeats,
                        logits_to_keep=fed.shape[1], trim=False)  # crop() cuts the rejected rows, then trims

    def crop(self) -> None:
        """Roll both caches back to the kept positions: every position of the ids but the newest token."""
        roll_back(self.cache, kv_length(self.cache) - (self.ids.shape[1] - 1))
        self.drafter.sync(self.ids)

    # ------------------------------------------------------------ conveniences

    def step(self) -> RoundTrace:
        return self.round() if self.rounds else self.prefill()

    # ------------------------------------------------------------ running totals

    @property
    def proposed(self) -> int:
        return sum(r.proposed for r in self.rounds)

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.rounds)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / proposed over the run (None before anything was proposed)."""
        return self.accepted / self.proposed if self.proposed else None

    @property
    def verify_passes(self) -> int:
        return max(0, len(self.rounds) - 1)

    @property
    def tokens_per_target_pass(self) -> float | None:
        """Tokens appended per verify pass (plain decoding: exactly 1 per pass); the prefill is left out."""
        made = sum(len(r.new_ids) for r in self.rounds[1:])
        return made / self.verify_passes if self.verify_passes else None

    @property
    def target_passes(self) -> int:
        return len(self.rounds)

    @property
    def target_passes_saved(self) -> int:
        """Plain decoding makes one target pass per generated token; this run made `target_passes`."""
        return len(self.generated_ids) - self.target_passes

    def totals(self) -> dict:
        return {"proposed": self.proposed, "accepted": self.accepted, "acceptance_rate": self.acceptance_rate,
                "target_passes": self.target_passes, "verify_passes": self.verify_passes,
                "tokens_per_target_pass": self.tokens_per_target_pass,
                "target_passes_saved": self.target_passes_saved, "tokens": len(self.generated_ids)}

    def report(self, attention: bool = False) -> dict:
        return {"prompt": self.prompt, "target": self.lm.spec.name, "drafter": self.drafter.name, "k": self.k,
                "sampling": self.sampling.__dict__, "max_new_tokens": self.max_new_tokens, "text": self.text,
                "generated_ids": self.generated_ids, "stop_reason": self.stop_reason, **self.totals(),
                "rounds": [r.to_dict(attention=attention) for r in self.rounds]}

    def free(self) -> None:
        """Drop the caches and records (Reset, or a session ending)."""
        self.cache = None
        self.drafter.free()
        self.rounds = []

    # ------------------------------------------------------------ inside a round

    def _proposals_this_round(self) -> int:
        """k, fewer near the end: a round appends accepted + 1 tokens, and every fed position must fit."""
        remaining = self.max_new_tokens - len(self.generated_ids)
        room = min(self.lm.spec.max_positions, self.drafter.max_positions or self.lm.spec.max_positions)
        return max(0, min(self.k, remaining - 1, room - self.ids.shape[1]))

    def _close(self, proposal: Proposal, fed: torch.Tensor, result: Pass, past: int, judged: Judgement,
               p_row: torch.Tensor, sample_ms: float, kind: str) -> RoundTrace:
        """Read the pass's layers (BEFORE the crop: all q_len columns it wrote), append the kept tokens, crop."""
        phase = "prefill" if kind == "prefill" else "verify"
        q_len, kv_len = fed.shape[1], past + fed.shape[1]
        rows = rows_kept(self.lm, "prefill", q_len, kv_len) if self.record else 0  # every fed row, like a prefill
        layers = record_layers(self.lm, self.cache, result, q_len, kv_len, rows)
        after_verify = kv_length(self.cache)
        new = self._append(list(proposal.ids[:judged.accepted]) + [judged.token_id])
        self.crop()
        tok = self.lm.tokenizer
        step = StepTrace(
            phase=phase, step=len(self.rounds), use_cache=True, fed_from=past, fed_ids=tuple(fed[0].tolist()),
            fed_tokens=tuple(token_pieces(tok, fed[0].tolist())) if self.record else (),
            q_len=q_len, kv_len=kv_len, token_id=judged.token_id, token=token_pieces(tok, [judged.token_id])[0],
            rule=self.sampling.describe(),
            top=self._candidates(result, judged.accepted, judged.token_id, p_row) if self.record else (),
            layers=layers, pattern_rows=rows,
            attention_note=_attention_note(phase, self.record, rows, q_len, kv_len,
                                           cut=after_verify - kv_length(self.cache)),
            hidden_shape=result.hidden_shape, logits_shape=tuple(result.logits.shape),
            timing=Timing(result.timing.samples_ms, result.timing.warmup_ms, sample_ms),
            flops_estimate=step_flops(self.lm.spec, q_len, past, logit_rows=result.logits.shape[1]),
            bytes_estimate=step_bytes(self.lm.spec, q_len, past, self.lm.elem_bytes),
        )
        outcomes = tuple("accepted" if i < judged.accepted else "rejected" if i == judged.accepted else "unchecked"
                         for i in range(len(proposal.ids)))
        trace = RoundTrace(
            round=len(self.rounds), drafter=self.drafter.name, proposed_ids=proposal.ids,
            proposed_tokens=tuple(token_pieces(tok, list(proposal.ids))), outcomes=outcomes,
            accept_probs=judged.accept_probs, accepted=judged.accepted, token_kind=kind,
            new_ids=tuple(new), new_tokens=tuple(token_pieces(tok, new)),
            cache_before=past, cache_after_verify=after_verify, cache_after_crop=kv_length(self.cache),
            draft_cache_after=self.drafter.cache_len, draft_ms=proposal.pass_ms, target=step,
        )
        self.rounds.append(trace)
        return trace

    def _append(self, tokens: list[int]) -> list[int]:
        """Append tokens one by one, stopping as the Stepper would (EOS, max_new_tokens, context limit)."""
        kept = []
        for token in tokens:
            self.ids = torch.cat([self.ids, torch.tensor([[token]])], dim=1)
            kept.append(token)
            eos = self.lm.tokenizer.eos_token_id
            if self.stop_on_eos and eos is not None and token == eos:
                self.stop_reason = "eos"
            elif len(self.generated_ids) >= self.max_new_tokens:
                self.stop_reason = "max_new_tokens"
            elif self.ids.shape[1] >= self.lm.spec.max_positions:
                self.stop_reason = "context_limit"
            if self.stop_reason:
                break
        return kept

    def _candidates(self, result: Pass, row: int, token_id: int, p_row: torch.Tensor):
        """The target's most likely tokens at the row that gave its own token (before and after the warpers)."""
        raw = result.logits[0, row].detach().float().cpu()
        return record_candidates(self.lm, Choice(token_id, raw, torch.softmax(raw, dim=-1), p_row.float()))


def _attention_note(phase: str, record: bool, rows: int, q_len: int, kv_len: int, cut: int) -> str:
    if not record:
        return "not recorded (recording off)"
    if phase == "prefill":
        return f"all {q_len} × {kv_len} causal rows" if rows == q_len else f"last row only of {q_len} × {kv_len}"
    shown = f"all {q_len} fed rows" if rows == q_len else f"the last of {q_len} fed rows"
    return (f"{shown} × {kv_len} keys: the newest token and {q_len - 1} proposals checked in one pass; "
            f"{cut} of the columns written were then cut from the cache")


# ---------------------------------------------------------------- plain vs speculative, measured


def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """E = (1 - α^(k+1)) / (1 - α): tokens one verify pass yields when each proposal is kept with chance α."""
    return float(k + 1) if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al. 2023: E / (k·c + 1), c = one draft step's cost over one target pass's."""
    return expected_tokens_per_pass(alpha, k) / (k * c + 1.0)


def measure(target: LoadedModel, prompt: str, steps: int, drafter: DraftModel | PromptLookup, k: int = 4,
            repeats: int = 3, sampling: Sampling | None = None) -> dict:
    """Plain decoding vs speculative decoding of the same prompt and length, in this process, alternated.

    One untimed run of each first (warm-up, excluded), then `repeats` runs of each in alternating order, so
    neither has a quieter machine. Times are per generated token over the decode phase (after the prefill,
    which both make once: the target's, plus the draft model's own). Measured, not derived: α, the cost
    ratio c, the speed-up; the formula's prediction is computed from the measured α and c and labelled so.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
        raise StepError(f"Comparing decoding needs at least 2 new tokens (got {steps!r}): the first comes from the "
                        "prefill, which both make alike.")
    sampling = sampling or Sampling()

    def plain():
        s = Stepper(target, prompt, sampling=sampling, max_new_tokens=steps, record=False, repeats=1)
        s.prefill()
        t0 = time.perf_counter()
        s.run()
        return s, (time.perf_counter() - t0) * 1e3

    def speculative():
        s = Speculator(target, prompt, drafter, k=k, sampling=sampling, max_new_tokens=steps, record=False,
                       repeats=1)
        s.prefill()
        t0 = time.perf_counter()
        s.run()
        return s, (time.perf_counter() - t0) * 1e3

    plain(), speculative()  # warm-up: first-call costs of both paths, excluded
    timed = {plain: [], speculative: []}  # (run, decode wall ms) in the order they ran
    for r in range(max(1, repeats)):
        for which in ((plain, speculative) if r % 2 == 0 else (speculative, plain)):
            timed[which].append(which())

    def per_token(run, ms):
        return ms / max(1, len(run.generated_ids) - 1)  # the first token came from the prefill

    plain_ms = [per_token(*x) for x in timed[plain]]
    spec_ms = [per_token(*x) for x in timed[speculative]]
    # time outside the forward passes: sampling, bookkeeping, judging, cropping (wall - passes, per pass)
    plain_overhead = statistics.median((ms - sum(t.forward_ms for t in run.traces[1:])) / max(1, len(run.traces) - 1)
                                       for run, ms in timed[plain])
    spec_overhead = statistics.median((ms - sum(sum(r.draft_ms) + r.verify_ms for r in run.rounds[1:]))
                                      / max(1, len(run.rounds) - 1) for run, ms in timed[speculative])
    plain_runs, spec_runs = [run for run, _ in timed[plain]], [run for run, _ in timed[speculative]]
    base, spec = plain_runs[-1], spec_runs[-1]
    rounds = [r for s in spec_runs for r in s.rounds[1:]]
    proposed = sum(r.proposed for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    checked = sum(r.checked for r in rounds)
    # the formula's α is the chance that a proposal the target looks at is kept; proposals after a rejection are
    # never looked at, so accepted / proposed would understate it
    alpha = accepted / checked if checked else 0.0
    verify_ms = statistics.median(r.verify_ms for r in rounds) if rounds else 0.0
    decode_ms = statistics.median(t.forward_ms for s in plain_runs for t in s.traces if t.phase == "decode") \
        if any(len(s.traces) > 1 for s in plain_runs) else 0.0
    draft_per_token = sum(sum(r.draft_ms) for r in rounds) / proposed if proposed else 0.0
    c = draft_per_token / verify_ms if verify_ms else 0.0
    made = sum(len(r.new_ids) for r in rounds)
    out = {
        "target": target.spec.name, "drafter": drafter.name, "k": k, "prompt": prompt, "steps": steps,
        "device": str(target.device), "sampling": sampling.describe(),
        "text": spec.text, "generated_ids": spec.generated_ids, "plain_ids": base.generated_ids,
        "identical": spec.generated_ids == base.generated_ids,
        "acceptance_rate": accepted / proposed if proposed else None, "alpha": alpha if checked else None,
        "proposed": proposed, "checked": checked, "accepted": accepted,
        "proposals_per_round": proposed / len(rounds) if rounds else 0.0,
        "tokens_per_target_pass": made / len(rounds) if rounds else None,
        "expected_tokens_per_pass": expected_tokens_per_pass(alpha, k),
        "target_passes": spec.target_passes, "plain_target_passes": len(base.traces),
        "target_passes_saved": len(base.traces) - spec.target_passes,
        "plain_ms_per_token": statistics.median(plain_ms), "speculative_ms_per_token": statistics.median(spec_ms),
        "plain_ms_per_token_runs": plain_ms, "speculative_ms_per_token_runs": spec_ms,
        "speedup": statistics.median(plain_ms) / statistics.median(spec_ms),
        "draft_ms_per_proposed_token": draft_per_token, "verify_ms": verify_ms, "plain_decode_ms": decode_ms,
        "verify_vs_decode": verify_ms / decode_ms if decode_ms else None,
        "overhead_ms_per_round": spec_overhead, "plain_overhead_ms_per_step": plain_overhead,
        "spread": max(max(x) / min(x) for x in (plain_ms, spec_ms)),
        "cost_ratio_c": c, "predicted_speedup": predicted_speedup(alpha, k, c),
        "repeats": max(1, repeats), "warmup": "one run of each before timing, excluded",
        "rounds": [r.to_dict() for r in spec.rounds],
    }
    out["verdict"] = verdict(out)
    return out


def verdict(m: dict) -> str:
    """A plain-English reading of `measure`'s numbers: did it pay, and which number says why."""
    s, pred, k = m["speedup"], m["predicted_speedup"], m["k"]
    plain, spec = m.get("plain_ms_per_token_runs") or [], m.get("speculative_ms_per_token_runs") or []
    overlap = len(plain) > 1 and len(spec) > 1 and min(plain) <= max(spec) and min(spec) <= max(plain)
    if overlap and (s >= 1.05 or s <= 0.95):
        parts = [f"No clear difference here: the medians give x{s:.2f}, but the runs overlap (plain "
                 f"{min(plain):.2f}–{max(plain):.2f} ms per token, speculative {min(spec):.2f}–{max(spec):.2f} ms)."]
    elif s >= 1.05:
        parts = [f"Speculative decoding paid here: x{s:.2f} faster per token than plain decoding."]
    elif s > 0.95:
        parts = [f"About break-even here: x{s:.2f} per token against plain decoding."]
    else:
        parts = [f"Speculative decoding did not pay here: each token took x{1 / s:.2f} as long as with plain "
                 "decoding."]
    if not m["proposed"]:
        parts.append("The drafter proposed nothing (no earlier n-gram matched), so every round was a plain decode "
                     "step plus bookkeeping.")
        return " ".join(parts)
    a, tpp, e = m["alpha"], m["tokens_per_target_pass"], m["expected_tokens_per_pass"]
    parts.append(f"The target kept {m['acceptance_rate']:.0%} of all proposals and {a:.0%} of those it checked "
                 f"(α), so one target pass made {tpp:.2f} tokens (the formula expects {e:.2f} from α = {a:.2f} "
                 f"and k = {k}).")
    if m["proposals_per_round"] < k - 0.5:
        parts.append(f"The drafter proposed {m['proposals_per_round']:.1f} tokens per round on average, not k = {k}: "
                     "the formula assumes k every round.")
    c = m["cost_ratio_c"]
    parts.append(f"Drafting cost c = {c:.3f} of a verify pass per proposed token, so k proposals cost "
                 f"{k * c:.2f} verify passes per round.")
    r = m["verify_vs_decode"]
    if r is not None and r > 1.15:
        parts.append(f"A verify pass over {k + 1} rows took x{r:.2f} as long as a one-row decode pass: the formula "
                     "assumes extra rows are free, which holds when a pass is bound by reading the weights (a large "
                     "model on a GPU), not here.")
    elif r is not None:
        parts.append(f"A verify pass over {k + 1} rows cost about what a one-row decode pass costs (x{r:.2f}): the "
                     "fixed cost of a pass dominates, as the formula assumes.")
    parts.append(f"The formula E/(k·c+1) predicted x{pred:.2f}; measured x{s:.2f}.")
    extra, plain_extra = m["overhead_ms_per_round"], m["plain_overhead_ms_per_step"]
    if extra > 1.5 * plain_extra and extra > 0.1 * m["verify_ms"]:
        parts.append(f"The formula counts forward passes only; each round also spent {extra:.2f} ms outside them "
                     f"(judging, cropping both caches, bookkeeping) against {plain_extra:.2f} ms per plain step.")
    if m["spread"] > 1.3:
        parts.append(f"The timed runs varied by up to x{m['spread']:.2f} from one another (other work on the "
                     "machine does this), so read these times as rough.")
    return " ".join(parts)
