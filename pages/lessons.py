"""Lessons: the ideas in order, each with the live views of the real model and a control to try.

Every number a lesson quotes is computed from a run made while the page draws; the
text around it is only the explanation.
"""

import math

import numpy as np
import pandas as pd
import streamlit as st

from engine import DecodeLabError, Sampling, Stepper, compare, kvcalc
from engine import figures as fig
from engine.batch import run_batch
from engine.stepper import token_pieces
from pages.shared import PROMPTS, frame

st.title("Lessons: how a language model generates text")
settings, lm = frame()
if lm is None:
    st.error("No model is loaded: see the message in the sidebar.")
    st.stop()
m = lm.summary
PROMPT_TITLES = [p["title"] for p in PROMPTS]


def prompt_picker(key: str, default: int = 0) -> str:
    title = st.selectbox("try it: the prompt", PROMPT_TITLES, index=default, key=key)
    return next(p["prompt"] for p in PROMPTS if p["title"] == title)


def greedy_run(prompt: str, decode_steps: int) -> Stepper:
    """Prefill, then `decode_steps` greedy decode steps: the live run a lesson talks about."""
    s = Stepper(lm, prompt, max_new_tokens=decode_steps + 1, stop_on_eos=False)
    s.run()
    return s


def labels(s: Stepper) -> list[str]:
    return fig.axis_labels(token_pieces(lm.tokenizer, s.ids[0].tolist()))


# ------------------------------------------------------------------ the lessons


def lesson_tokens() -> None:
    st.markdown("A model never sees letters. A **tokenizer** cuts the text into pieces from a fixed vocabulary and "
                "replaces each piece by its number (its **id**). The model reads ids and writes ids; turning the "
                "ids back into text is **detokenizing**.")
    text = st.text_input("try it: type any text", "Once upon a time, Lily saw a dragon.", key="lesson1_text")
    if not text:
        st.info("Type some text to see its tokens.")
        return
    ids = lm.tokenizer(text)["input_ids"]
    bos = lm.tokenizer.bos_token_id
    st.markdown(fig.token_chips_html(list(zip(ids, token_pieces(lm.tokenizer, ids))), [], set()),
                unsafe_allow_html=True)
    back = lm.tokenizer.decode(ids, skip_special_tokens=True)
    lead = (f" The first, id {ids[0]}, is the start marker `{lm.tokenizer.decode([ids[0]])}` the tokenizer adds."
            if ids and ids[0] == bos else "")
    st.markdown(f"**{len(text)} characters became {len(ids)} tokens** out of a vocabulary of {m.vocab:,}.{lead} "
                f"Decoding the ids gives back `{back}`: "
                f"{'the same text' if back == text else 'not exactly the same text (the tokenizer normalised it)'}.")


def lesson_prefill() -> None:
    st.markdown("**Prefill** is the first forward pass: every prompt position goes through the model at once. "
                "Each position's query is compared with the keys of itself and every earlier position; the "
                "**causal mask** hides later positions, because when the model writes a token the future does "
                "not exist yet.")
    prompt = prompt_picker("lesson2_prompt", default=2)
    s = greedy_run(prompt, decode_steps=1)
    pre, dec = s.traces[0], s.traces[1]
    att = pre.attention[0, 0].float().numpy()
    above = float(np.triu(att, 1).sum())
    st.markdown(f"This prompt is **{pre.q_len} tokens**, so prefill pushed all {pre.q_len} through at once: the hidden "
                f"states are `[1, {pre.q_len}, {m.d_model}]` = `[batch, pos, d_model]`. In the heatmap (layer 0, "
                f"head 0) every row sums to 1, and the weights above the diagonal add up to **{above:.1g}**: the "
                "mask at work.")
    st.plotly_chart(fig.attention_heatmap(att, labels(s)[: pre.kv_len], labels(s)[: pre.kv_len],
                                          "layer 0, head 0: prefill, causal"), key="lesson2_att")
    st.dataframe(fig.shapes_frame(pre), hide_index=True, width="stretch")
    st.markdown(f"Prefill multiplies whole matrices: about **{pre.intensity_estimate:.1f} FLOPs per byte** moved (estimate), "
                f"against {dec.intensity_estimate:.1f} for the decode step that follows. Many operations per byte fetched "
                "means the arithmetic units, not memory, set the pace: prefill is **compute-bound**.")


def lesson_decode() -> None:
    st.markdown("**Decode** adds one token per forward pass. Only the newest position is computed; its query is "
                "compared with the keys of every position so far. The attention matrix gains **one row** per step, "
                "and the rows above it never change.")
    steps = st.slider("try it: decode steps", 1, 12, 5, key="lesson3_steps")
    s = greedy_run(PROMPTS[0]["prompt"], decode_steps=steps)
    pre, t = s.traces[0], s.traces[-1]
    st.markdown(f"After prefill ({pre.q_len} positions) and {steps} decode steps, the last step fed **1 token** "
                f"(q_len = {t.q_len}) and attended to **{t.kv_len} positions** (kv_len). Its hidden states are "
                f"`[1, 1, {m.d_model}]`, against `[1, {pre.q_len}, {m.d_model}]` at prefill. It took "
                f"{t.latency_ms:.1f} ms (measured) for {t.flops_estimate / 1e6:.1f} MFLOPs (estimate): about "
                f"**{t.intensity_estimate:.1f} FLOPs per byte**, so every weight is fetched from memory to do very little "
                "work with it. Decode is **memory-bound**.")
    z = fig.assembled_attention(s.traces, 0, 0)
    st.plotly_chart(fig.attention_heatmap(z, labels(s)[: z.shape[0]], labels(s)[: z.shape[1]],
                                          "layer 0, head 0: the prefill square plus one row per decode step"),
                    key="lesson3_att")
    st.dataframe(fig.shapes_frame(t), hide_index=True, width="stretch")


def lesson_kv_cache() -> None:
    st.markdown("A decode step needs the **keys and values** of every earlier position. They do not change once "
                "computed, so the **KV cache** keeps them, per layer, and each step adds only the new position's. "
                "Queries are not kept: a query is used once, by its own position, to look back; no later step ever "
                "needs an old query again.")
    steps = st.slider("try it: decode steps", 0, 20, 8, key="lesson4_steps")
    s = greedy_run(PROMPTS[0]["prompt"], decode_steps=steps)
    t = s.traces[-1]
    batch, kv_heads, pos, head_dim = t.kv_shapes[0]
    elem = t.kv_bytes_per_layer[0] // (2 * batch * kv_heads * pos * head_dim)
    formula = 2 * batch * kv_heads * pos * head_dim * elem * m.layers
    st.markdown(f"After prefill and {steps} decode steps the cache holds **{pos} positions**. Each layer stores keys "
                f"and values of shape `[{batch}, {kv_heads}, {pos}, {head_dim}]` = `[batch, kv_head, pos, head_dim]`.")
    total = f"{formula:,}".replace(",", "{,}")  # LaTeX needs braces around a thousands comma
    st.latex(rf"2 \times {batch} \times {kv_heads} \times {pos} \times {head_dim} \times {elem}\,\text{{bytes}} "
             rf"\times {m.layers}\ \text{{layers}} = {total}\ \text{{bytes}}")
    st.markdown(f"Measured from the real tensors: **{t.kv_bytes:,} bytes** "
                f"({'the same' if t.kv_bytes == formula else 'different!'}). Each new token adds "
                f"{formula // pos:,} bytes.")
    st.dataframe(fig.kv_frame(t), hide_index=True, width="stretch")
    st.plotly_chart(fig.kv_growth_figure(s.traces), key="lesson4_growth")


def lesson_no_cache() -> None:
    st.markdown("Without the cache nothing is kept between steps, so every decode step recomputes keys and values "
                "for **all** positions so far. The tokens come out the same; the work does not.")
    steps = st.slider("try it: new tokens", 5, 60, 30, 5, key="lesson5_steps")
    rep = compare(lm, PROMPTS[0]["prompt"], steps, record=False, stop_on_eos=False)
    cache, nocache = rep["steppers"]["cache"].traces, rep["steppers"]["nocache"].traces
    sum_q = {name: sum(t.q_len for t in tr) for name, tr in (("cache", cache), ("nocache", nocache))}
    flops = {name: sum(t.flops_estimate for t in tr) for name, tr in (("cache", cache), ("nocache", nocache))}
    sp = rep["speedup"]
    st.markdown(f"Same tokens with and without the cache: **{'yes' if rep['identical'] else 'no'}** (largest logit "
                f"difference {rep['max_logit_diff']:.1g}). Over {len(cache)} forward passes the cached run computed "
                f"**{sum_q['cache']} positions**; the uncached one **{sum_q['nocache']}**. Total work (estimate): "
                f"{flops['nocache'] / flops['cache']:.1f}× more without the cache. Measured decode time: "
                f"{sp['nocache_total_ms']:.0f} ms without the cache, {sp['cache_total_ms']:.0f} ms with it.")
    st.plotly_chart(fig.work_per_step_figure(cache, nocache), key="lesson5_work")
    st.markdown("Step *i* without the cache computes about *s + i* positions, so *n* steps cost about "
                "*n·s + n²/2* position-passes: **quadratic** in n. With the cache each step computes one: "
                "**linear**. On a model this small, fixed per-step costs hide part of the gap in the measured times; "
                "the Race page measures it at longer lengths.")


def lesson_sampling() -> None:
    st.markdown("The last position's output is a score (**logit**) for every token in the vocabulary. Softmax turns "
                "scores into probabilities. **Greedy** takes the most likely token. **Sampling** draws one at "
                "random after **warpers** reshape the distribution: temperature flattens (>1) or sharpens (<1) "
                "it, top-k keeps the k most likely, top-p keeps the smallest set whose probabilities add up to p, "
                "and a repetition penalty lowers tokens already used.")
    c = st.columns(5)
    temperature = c[0].slider("temperature", 0.1, 2.0, 1.0, 0.1, key="lesson6_t")
    top_k = c[1].number_input("top-k (0 = off)", 0, m.vocab, 0, key="lesson6_k")
    top_p = c[2].slider("top-p", 0.05, 1.0, 1.0, 0.05, key="lesson6_p")
    rep = c[3].slider("repetition penalty", 1.0, 2.0, 1.0, 0.1, key="lesson6_r")
    seed = c[4].number_input("seed", 0, 10_000, 0, key="lesson6_seed")
    sampling = Sampling(greedy=False, temperature=temperature, top_k=int(top_k), top_p=top_p,
                        repetition_penalty=rep, seed=int(seed))
    s = Stepper(lm, PROMPTS[2]["prompt"], sampling=sampling, max_new_tokens=1)
    t = s.prefill()
    top = t.top[0]
    kept = sum(1 for c_ in t.top if c_.p_after > 0)
    st.plotly_chart(fig.next_token_figure(t), key="lesson6_next")
    st.markdown(f"Before the warpers the most likely next token is **{fig.show_piece(top.token)}** at "
                f"{top.p_before:.1%}; after them it has {top.p_after:.1%}, and {kept} of the {len(t.top)} shown "
                f"candidates can still be drawn. This draw ({t.rule}) picked **{fig.show_piece(t.token)}**.")
    st.markdown(f"A run **stops** at the end-of-text token (`{lm.tokenizer.eos_token}`, id "
                f"{lm.tokenizer.eos_token_id}), after the maximum number of new tokens, when the new text contains "
                f"a stop string, or when the context of {m.max_positions} positions is full.")


def lesson_batches() -> None:
    st.markdown("Servers answer many prompts at once by stacking them into a **batch**: one forward pass, "
                "`[batch, pos, d_model]`. Prompts have different lengths, so the short ones are **padded**, on the "
                "**left**: then every row's last position is a real token, the next-token logits of all rows sit in "
                "the same column, and each decode step appends one column to every row. The **attention mask** "
                "marks padding with 0 so no real token ever attends to it.")
    a = st.text_input("try it: first prompt", "Tom had a red ball.", key="lesson7_a")
    b = st.text_input("try it: second prompt", PROMPTS[1]["prompt"], key="lesson7_b")
    try:
        run = run_batch(lm, [a, b], steps=8)
    except DecodeLabError as e:
        st.error(str(e))
        return
    short = int(np.argmax(run.pad_counts))
    st.dataframe(fig.padded_batch_frame(run.pieces, run.input_ids, run.attention_mask), width="stretch")
    pad_id, bos_id = int(run.input_ids[short, 0]), lm.tokenizer.bos_token_id
    if pad_id == bos_id:
        st.caption(f"Padding reuses id {pad_id}, the start marker's id (this tokenizer has no separate pad token): the "
                   "ids alone cannot tell padding from a real token; only the attention mask can.")
    st.markdown(f"Row {short} got **{run.pad_counts[short]} padding positions**. Its attention (layer 0, head 0) "
                f"below: the padded columns are zero. Over every layer and head, the largest weight a real token "
                f"gave a padded one is **{run.max_attention_on_padding():.1g}**.")
    pieces = [p or "PAD" for p in run.pieces[short]]
    st.plotly_chart(fig.attention_heatmap(run.prefill_attention[0, short, 0].numpy(), fig.axis_labels(pieces),
                                          fig.axis_labels(pieces), f"batch row {short}, layer 0, head 0"),
                    key="lesson7_att")
    st.caption("The PAD rows at the top are the padding positions' own queries: they attend somewhere (every row of "
               "a softmax sums to 1), but their outputs are never used.")
    st.dataframe(pd.DataFrame([(name, str(list(shape))) for name, shape in run.shapes],
                              columns=["tensor", "shape [batch, ...]"]), hide_index=True)
    alone = []
    for prompt, tokens in zip(run.prompts, run.generated):
        solo = Stepper(lm, prompt, max_new_tokens=len(tokens), stop_on_eos=False)
        solo.run()
        alone.append(list(tokens) == solo.generated_ids)
    for i, text in enumerate(run.texts):
        st.markdown(f"Row {i}: {text} — same tokens as running it alone: **{'yes' if alone[i] else 'no'}**")


def lesson_scale() -> None:
    st.markdown("The cache that was a few kilobytes here is the main memory cost of serving big models. The formula "
                "is the same: 2 × layers × kv_heads × head_dim × bytes per element, per token.")
    s = greedy_run(PROMPTS[0]["prompt"], decode_steps=4)
    t = s.traces[-1]
    live = t.kv_bytes / t.kv_shapes[0][2]
    tokens = st.select_slider("try it: context length", [1024, 4096, 8192, 32768], 4096, key="lesson8_tokens")
    rows = []
    for name in ["Llama-2-7b", "Llama-3-8B", "Llama-2-70b", "Llama-3-70B"]:
        arch = kvcalc.from_table(name)
        rows.append({"model": name, "attention": f"{arch.attention} ({arch.heads} query / {arch.kv_heads} KV heads)",
                     "KV per token (fp16, estimate)": kvcalc.human(kvcalc.bytes_per_token(arch, 2)),
                     f"KV for {tokens:,} tokens": kvcalc.human(kvcalc.kv_bytes(arch, tokens)),
                     f"same model as MHA, {tokens:,} tokens": kvcalc.human(kvcalc.kv_bytes(arch.as_mha(), tokens))})
    st.markdown(f"Your live model stores **{live:,.0f} bytes per token** (measured, {m.dtype}). Published "
                f"configurations, computed from their figures (estimates, fp16, batch 1):")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    l2, l3 = kvcalc.from_table("Llama-2-70b"), kvcalc.from_table("Llama-3-8B")
    st.markdown(f"Grouped-query attention shares each K/V head among several query heads: Llama-2-70B's "
                f"{l2.heads} query heads use {l2.kv_heads} K/V heads, a cache {l2.heads // l2.kv_heads}× smaller "
                f"than MHA; Llama-3-8B's cache is {l3.heads // l3.kv_heads}× smaller than it would be with MHA.")
    st.markdown("What comes next, one sentence each:\n"
                "- **Paged KV cache** (vLLM's PagedAttention): store the cache in fixed-size blocks like virtual "
                "memory pages, so many sequences share GPU memory without fragmentation.\n"
                "- **Speculative decoding**: a small draft model proposes several tokens and the big model checks "
                "them all in one pass, turning memory-bound decode steps into one compute-bound pass.\n"
                "- **Quantized KV cache**: store keys and values in 8 or 4 bits to fit longer contexts "
                "(the Scale page has the sizes).")
    big = kvcalc.from_table("Llama-3-70B")
    per_sequence = kvcalc.kv_bytes(big, tokens)
    st.caption(f"Why it matters: at {tokens:,} tokens Llama-3-70B's cache is {kvcalc.human(per_sequence)} per "
               f"sequence (estimate); an 80 GB accelerator holds the caches of only {math.floor(80e9 / per_sequence)} "
               f"such sequences, with no room left for its {kvcalc.human(kvcalc.weight_bytes(big, 2))} of fp16 weights.")


LESSONS = {
    "1. Text in, tokens out": lesson_tokens,
    "2. Prefill: the whole prompt at once": lesson_prefill,
    "3. Decode: one token per step": lesson_decode,
    "4. The KV cache": lesson_kv_cache,
    "5. Without the cache": lesson_no_cache,
    "6. Choosing the next token": lesson_sampling,
    "7. Batches and padding": lesson_batches,
    "8. Scale: the cache of big models": lesson_scale,
}
TITLES = list(LESSONS)


def move(delta: int) -> None:
    i = TITLES.index(st.session_state.get("lesson_pick", TITLES[0]))
    st.session_state["lesson_pick"] = TITLES[max(0, min(len(TITLES) - 1, i + delta))]


wanted = st.session_state.pop("lesson_wanted", None)  # from a shared link: lesson=N
if wanted is not None:
    if 1 <= wanted <= len(TITLES):
        st.session_state["lesson_pick"] = TITLES[wanted - 1]
    else:
        st.warning(f"link parameter lesson={wanted} ignored: there are lessons 1 to {len(TITLES)}")
c = st.columns([4, 1, 1])
lesson = c[0].selectbox("lesson", TITLES, key="lesson_pick")
st.query_params["lesson"] = str(TITLES.index(lesson) + 1)  # the link reopens this lesson
c[1].button("Previous", on_click=move, args=(-1,), disabled=lesson == TITLES[0], key="lesson_prev", width="stretch")
c[2].button("Next", on_click=move, args=(1,), disabled=lesson == TITLES[-1], key="lesson_next", width="stretch")
st.header(lesson)
try:
    LESSONS[lesson]()
except DecodeLabError as e:
    st.error(str(e))
