"""What the live model predicts next for a prompt, beside what a big model predicts.

A web-text example: "Today's weather is so" → "nice" or "warm". A model trained only on children's
stories (TinyStories) has other habits; `next_word_odds` measures them with one prefill pass of the one
generation loop, and reads the probability and rank of those words off the same logits.
"""

from __future__ import annotations

from engine.load.loaded import LoadedModel

ARTICLE_PROMPT = "Today's weather is so"
ARTICLE_WORDS = (" nice", " warm")


def next_word_odds(lm: LoadedModel, prompt: str = ARTICLE_PROMPT, words: tuple[str, ...] = ARTICLE_WORDS,
                   top: int = 5) -> dict:
    """The model's `top` next tokens for `prompt` (piece, probability), and for each word its first token's
    probability and rank among the whole vocabulary (a word cut into several tokens is judged by its first)."""
    from engine.generate.stepper import Stepper

    run = Stepper(lm, prompt, max_new_tokens=1, repeats=1)
    t = run.prefill()
    probs = run.last_logits.float().softmax(-1)
    odds = {}
    for word in words:
        ids = lm.tokenizer(word, add_special_tokens=False)["input_ids"]
        p = float(probs[ids[0]])
        odds[word.strip()] = {"p": p, "rank": int((probs > p).sum()) + 1, "tokens": len(ids)}
    run.free()
    return {"prompt": prompt, "top": [(c.token, c.p_before) for c in t.top[:top]], "words": odds,
            "chosen": t.token}


def until_end(lm: LoadedModel, prompt: str, max_new_tokens: int = 400, on_step=None) -> dict:
    """Greedy from `prompt` until the run stops by itself (end-of-text) or at `max_new_tokens`; recording off.

    on_step(new_tokens) after every pass, for a progress bar. Returns the count, the stop reason, the text.
    """
    from engine.generate.stepper import Stepper

    run = Stepper(lm, prompt, max_new_tokens=max_new_tokens, record=False, repeats=1)
    run.run(on_step=(lambda _t: on_step(len(run.generated_ids))) if on_step else None)
    out = {"prompt": prompt, "tokens": len(run.generated_ids), "stop_reason": run.stop_reason,
           "text": run.generated_text, "max_new_tokens": max_new_tokens}
    run.free()
    return out
