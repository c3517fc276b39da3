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

The target's pass is `engine.forward.run.run_pass`, as for every other pass the engine makes. A Speculator
is one Sequence of the generation loop (its tokens, chooser and stop rule: end-of-text, max new tokens, stop
strings, the context) and one Run (records, step(), done, run(n), free()); each target pass is recorded by
the loop's `record_pass` (engine/generate/loop.py). The drafters live in engine/generate/drafters.py;
whether it pays is measured by topics/speculative/measure.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from engine.errors import StepError
from engine.forward.cache import kv_length, new_cache, roll_back
from engine.forward.run import Pass, run_pass
from engine.forward.sampling import Choice, Chooser, Sampling
from engine.forward.trace import StepTrace
from engine.generate.drafters import DraftModel, PromptLookup, Proposal
from engine.generate.loop import Run, Sequence, record_candidates, record_pass, rows_kept, timing_repeats, token_pieces
from engine.load.loaded import LoadedModel
from engine.timing import span

MAX_K = 16  # proposals per round: beyond this almost every round is cut early anyway


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
    past: int  # target cache positions before the round
    cache_after_verify: int  # ... after the verify pass (past + q_len)
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
        """First fed position whose K/V was cut (for drawing.stage.stage_svg), None when nothing was."""
        return self.cache_after_crop if self.cut else None

    def to_dict(self, attention: bool = False) -> dict:
        return {
            "round": self.round, "phase": self.phase, "drafter": self.drafter,
            "proposed_ids": list(self.proposed_ids), "proposed_tokens": list(self.proposed_tokens),
            "outcomes": list(self.outcomes), "accept_probs": [round(x, 6) for x in self.accept_probs],
            "accepted": self.accepted, "token_id": self.token_id, "token": self.token, "token_kind": self.token_kind,
            "new_ids": list(self.new_ids), "new_tokens": list(self.new_tokens),
            "q_len": self.q_len, "kv_len": self.kv_len,
            "past": self.past, "cache_after_verify": self.cache_after_verify,
            "cache_after_crop": self.cache_after_crop, "cut": self.cut, "rejected_from": self.rejected_from,
            "draft_cache_after": self.draft_cache_after,
            "draft_ms": [round(x, 4) for x in self.draft_ms], "verify_ms": round(self.verify_ms, 4),
            "target_pass": self.target.to_dict(attention=attention),
        }


# ---------------------------------------------------------------- the run


class Speculator(Sequence, Run):
    """One sequence generated speculatively on a shared target; owns its caches and its RoundTraces.

    `prefill()` once, then `round()` per draft-verify-crop round (a page steps it like the Stepper).
    """

    def __init__(self, target: LoadedModel, prompt: str, drafter: DraftModel | PromptLookup, k: int = 4,
                 sampling: Sampling | None = None, max_new_tokens: int = 32,
                 stop_strings: tuple[str, ...] | list[str] = (), record: bool = True, stop_on_eos: bool = True,
                 repeats: int | None = None):
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise StepError(f"Proposals per round (k) must be a whole number from 1 to {MAX_K} (got {k!r}).")
        super().__init__(target, prompt, sampling=sampling, max_new_tokens=max_new_tokens, stop_strings=stop_strings,
                         stop_on_eos=stop_on_eos)
        self.record = record
        self.repeats = timing_repeats(record, repeats)
        drafter.check(target)
        drafter.repeats = self.repeats
        self.drafter = drafter
        self.k = k
        self.cache = None
        self.records: list[RoundTrace] = []  # round 0 is the prefill


    # ------------------------------------------------------------ the two phases

    def prefill(self) -> RoundTrace:
        """Round 0: the target's prefill [batch, s] picks the first token; a draft model prefills its own cache."""
        if self.records:
            raise StepError("Prefill has already run for this prompt: press Reset to start again.")
        proposal = Proposal((), (), self.drafter.prefill(self.ids))
        self.cache = new_cache(self.lm.config)
        fed = self.ids  # [batch, s]
        result = run_pass(self.lm, fed, self.cache, record=self.record, repeats=self.repeats)
        with span(self.lm.device) as choosing:
            p = self.chooser.distribution(self.ids, result.logits[0, -1])
            judged = Judgement(0, self.chooser.draw(p), ())
        return self._close(proposal, fed, result, 0, judged, p, choosing.ms, "prefill")

    def round(self) -> RoundTrace:
        """Draft k tokens, verify them in one target pass, keep the agreeing prefix + the target's token, crop."""
        if not self.records:
            raise StepError("Run Prefill first: a round needs the prompt to have been processed.")
        if self.done:
            raise StepError(f"This run has finished ({self.stop_reason}): press Reset to start again.")
        proposal = self.draft()
        past = kv_length(self.cache)
        fed = torch.cat([self.ids[:, -1:], torch.tensor([proposal.ids], dtype=torch.long).view(1, -1)], dim=1)
        result = self.verify(fed)  # fed [batch, k+1]
        with span(self.lm.device) as judging:
            ids = self.ids
            p_rows = [self.chooser.distribution(torch.cat([ids, fed[:, 1:i + 1]], dim=1), result.logits[0, i])
                      for i in range(fed.shape[1])]  # row i: the target's distribution after fed row i
            judged = judge(p_rows, list(proposal.q_rows), proposal.ids, self.chooser)
        kind = "plain" if not proposal.ids else ("bonus" if judged.accepted == len(proposal.ids) else "correction")
        return self._close(proposal, fed, result, past, judged, p_rows[judged.accepted], judging.ms, kind)

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
        roll_back(self.cache, kv_length(self.cache) - (len(self) - 1))
        self.drafter.sync(self.ids)

    # ------------------------------------------------------------ conveniences

    def step(self) -> RoundTrace:
        """The prefill first, then one round per call."""
        return self.round() if self.records else self.prefill()

    # ------------------------------------------------------------ running totals

    @property
    def proposed(self) -> int:
        return sum(r.proposed for r in self.records)

    @property
    def accepted(self) -> int:
        return sum(r.accepted for r in self.records)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / proposed over the run (None before anything was proposed)."""
        return self.accepted / self.proposed if self.proposed else None

    @property
    def verify_passes(self) -> int:
        return max(0, len(self.records) - 1)

    @property
    def tokens_per_target_pass(self) -> float | None:
        """Tokens appended per verify pass (plain decoding: exactly 1 per pass); the prefill is left out."""
        made = sum(len(r.new_ids) for r in self.records[1:])
        return made / self.verify_passes if self.verify_passes else None

    @property
    def target_passes(self) -> int:
        return len(self.records)

    @property
    def target_passes_saved(self) -> int:
        """Plain decoding makes one target pass per generated token; this run made `target_passes`."""
        return len(self.generated_ids) - self.target_passes

    def report(self, attention: bool = False) -> dict:
        """The whole run as plain JSON-ready data, its running totals among it (the JSON edge)."""
        totals = ("proposed", "accepted", "acceptance_rate", "target_passes", "verify_passes",
                  "tokens_per_target_pass", "target_passes_saved")
        return {"prompt": self.prompt, "target": self.lm.spec.name, "drafter": self.drafter.name, "k": self.k,
                "sampling": self.sampling.__dict__, "max_new_tokens": self.max_new_tokens,
                "stop_strings": list(self.stop_strings), "text": self.text, "generated_ids": self.generated_ids,
                "stop_reason": self.stop_reason, **{name: getattr(self, name) for name in totals},
                "tokens": len(self.generated_ids), "rounds": [r.to_dict(attention=attention) for r in self.records]}

    def free(self) -> None:
        """Drop the caches and records (Reset, or a session ending)."""
        self.cache = None
        self.drafter.free()
        self.records = []

    # ------------------------------------------------------------ inside a round

    def _proposals_this_round(self) -> int:
        """k, fewer near the end: a round appends accepted + 1 tokens, and every fed position must fit."""
        remaining = self.max_new_tokens - len(self.generated_ids)
        room = min(self.lm.spec.max_positions, self.drafter.max_positions or self.lm.spec.max_positions)
        return max(0, min(self.k, remaining - 1, room - len(self)))

    def _close(self, proposal: Proposal, fed: torch.Tensor, result: Pass, past: int, judged: Judgement,
               p_row: torch.Tensor, sample_ms: float, kind: str) -> RoundTrace:
        """Record the pass (BEFORE the crop: all q_len columns it wrote), append the kept tokens through the
        loop's stop rule, crop."""
        phase = "prefill" if kind == "prefill" else "verify"
        q_len, kv_len = fed.shape[1], past + fed.shape[1]
        rows = rows_kept(self.lm, q_len, kv_len, every_row=True) if self.record else 0  # every fed row
        top = self._candidates(result, judged.accepted, judged.token_id, p_row) if self.record else ()
        after_verify = kv_length(self.cache)
        step = record_pass(self, record=self.record, phase=phase, step=len(self.records), fed=fed, result=result,
                           past=past, cache=self.cache, token_id=judged.token_id, top=top, sample_ms=sample_ms,
                           rows=rows, note="")  # the note needs the crop: set below
        new = []
        for token in list(proposal.ids[:judged.accepted]) + [judged.token_id]:
            new.append(token)
            if self.append(token):  # the loop's stop rule: a stop string or end-of-text can end a round early
                break
        self.crop()
        if self.record:
            step = replace(step, attention_note=attention_note(phase, rows, q_len, kv_len,
                                                               cut=after_verify - kv_length(self.cache)))
        tok = self.lm.tokenizer
        outcomes = tuple("accepted" if i < judged.accepted else "rejected" if i == judged.accepted else "unchecked"
                         for i in range(len(proposal.ids)))
        trace = RoundTrace(
            round=len(self.records), drafter=self.drafter.name, proposed_ids=proposal.ids,
            proposed_tokens=tuple(token_pieces(tok, list(proposal.ids))), outcomes=outcomes,
            accept_probs=judged.accept_probs, accepted=judged.accepted, token_kind=kind,
            new_ids=tuple(new), new_tokens=tuple(token_pieces(tok, new)),
            past=past, cache_after_verify=after_verify, cache_after_crop=kv_length(self.cache),
            draft_cache_after=self.drafter.cache_len, draft_ms=proposal.pass_ms, target=step,
        )
        self.records.append(trace)
        return trace

    def _candidates(self, result: Pass, row: int, token_id: int, p_row: torch.Tensor):
        """The target's most likely tokens at the row that gave its own token (before and after the warpers)."""
        raw = result.logits[0, row].detach().float().cpu()
        return record_candidates(self.lm, Choice(token_id, raw, torch.softmax(raw, dim=-1), p_row.float()))


def attention_note(phase: str, rows: int, q_len: int, kv_len: int, cut: int) -> str:
    """Which attention rows a round's target pass keeps, and what the crop cut, in words."""
    if phase == "prefill":
        return f"all {q_len} × {kv_len} causal rows" if rows == q_len else f"last row only of {q_len} × {kv_len}"
    shown = f"all {q_len} fed rows" if rows == q_len else f"the last of {q_len} fed rows"
    return (f"{shown} × {kv_len} keys: the newest token and {q_len - 1} proposals checked in one pass; "
            f"{cut} of the columns written were then cut from the cache")
