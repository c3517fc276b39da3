"""Lessons: the ideas in order, each with the live views of the real model and a control to try.

Every number a lesson quotes is computed from a run made while the page draws, and every
label a figure could contradict ("compute-bound", "climbs") is computed from that figure's
own numbers; the text around them is only the explanation.
"""

import numpy as np
import pandas as pd
import streamlit as st

from engine import DecodeLabError, Sampling, Stepper, compare
from engine.measure import kvcalc
from engine.measure import roofline
from engine.draw import figures as fig
from engine.generate.batch import run_batch
from engine.generate.compare import kv_reuse
from engine.draw.stage import caption, stage_html, stage_svg
from engine.generate.loop import token_pieces
from ui.frame import PROMPTS, device_roof, error, frame, plain, scale, warning

st.title("Lessons: how a language model generates text")
settings, lm = frame(__file__)
if lm is None:
    st.error("No model is loaded: see the message in the sidebar.")
    st.stop()
m = lm.spec
PROMPT_TITLES = [p["title"] for p in PROMPTS]


def prompt_picker(key: str, default: int = 0) -> str:
    title = st.selectbox("try it: the prompt", PROMPT_TITLES, index=default, key=key)
    return next(p["prompt"] for p in PROMPTS if p["title"] == title)


def greedy_run(prompt: str, decode_steps: int, use_cache: bool = True) -> Stepper:
    """Prefill, then `decode_steps` greedy decode steps: the live run a lesson talks about."""
    s = Stepper(lm, prompt, max_new_tokens=decode_steps + 1, stop_on_eos=False, use_cache=use_cache)
    s.run()
    return s


def labels(s: Stepper) -> list[str]:
    return fig.axis_labels(token_pieces(lm.tokenizer, s.ids[0].tolist()))


def show_stage(s: Stepper, step: int, layer: int = 0) -> None:
    t = s.traces[step]
    st.html(stage_html(stage_svg(t, s.pieces(), s.prompt_len, layer=layer), caption(t)))


def bound_sentence(t, what: str) -> str:
    """'compute-bound' or 'memory-bound' from this step's intensity against this device's ridge (and an H100's)."""
    here, h100 = device_roof(), roofline.h100()
    return (f"{what} does about **{t.intensity_estimate:.1f} FLOPs per byte** it moves (estimate). This device's "
            f"measured ridge is {here.ridge:.1f} FLOP/byte, so here it is **{roofline.bound(t.intensity_estimate, here)}**; "
            f"on an {h100.name.split(' (')[0]} (ridge {h100.ridge:.0f}) the same step would be "
            f"**{roofline.bound(t.intensity_estimate, h100)}**.")


# ------------------------------------------------------------------ the lessons


def lesson_tokens() -> None:
    st.markdown("A model never sees letters. A **tokenizer** cuts the text into pieces from a fixed vocabulary and "
                "replaces each piece by its number (its **id**). The model reads ids and writes ids; turning the "
                "ids back into text is **detokenizing**.")
    text = st.text_input("try it: type any text", "Today's weather is so", key="lesson1_text")
    if not text:
        st.info("Type some text to see its tokens.")
        return
    ids = lm.tokenizer(text)["input_ids"]
    bos = lm.tokenizer.bos_token_id
    st.html(fig.token_chips_html(list(zip(ids, token_pieces(lm.tokenizer, ids))), [], set()))
    back = lm.tokenizer.decode(ids, skip_special_tokens=True)
    lead = (f" The first, id {ids[0]}, is the start marker the tokenizer adds." if ids and ids[0] == bos else "")
    st.markdown(f"**{len(text)} characters became {len(ids)} tokens** out of a vocabulary of {m.vocab:,}.{lead} "
                f"Decoding the ids gives back "
                f"{'the same text' if back == text else 'not exactly the same text (the tokenizer normalised it)'}:")
    st.text(back)


def lesson_prefill() -> None:
    st.markdown("**Prefill** is the first forward pass: every prompt position goes through the model at once. "
                "Each position's query is compared with the keys of itself and every earlier position; the "
                "**causal mask** hides later positions, because when the model writes a token the future does "
                "not exist yet. The stage shows s rows going in together, and K and V of all of them written to "
                "the cache at once.")
    prompt = prompt_picker("lesson2_prompt", default=2)
    s = greedy_run(prompt, decode_steps=1)
    pre, dec = s.traces[0], s.traces[1]
    show_stage(s, 0)
    rows, att = fig.attention_rows(pre, 0, 0)
    above = float(np.nansum(np.triu(np.nan_to_num(att, nan=0.0), 1)))
    st.markdown(f"This prompt is **{pre.q_len} tokens**, so prefill pushed all {pre.q_len} through at once: the rows "
                f"entering each block are `[1, {pre.q_len}, {m.d_model}]` = `[batch, pos, d_model]`. In the heatmap "
                f"(layer 0, head 0) every row sums to 1, and the weights above the diagonal add up to **{above:.1g}**: "
                "the mask at work (drawn grey: masked, not zero).")
    st.plotly_chart(fig.attention_heatmap(att, labels(s)[: pre.kv_len], labels(s)[: pre.kv_len],
                                          "layer 0, head 0: prefill, causal", scale=scale()), key="lesson2_att")
    st.markdown(bound_sentence(pre, "This prefill") + f" The decode step after it: {dec.intensity_estimate:.1f} "
                "FLOPs per byte. A longer prompt does more arithmetic per weight it reads, and moves right.")


def lesson_decode() -> None:
    st.markdown("**Decode** adds one token per forward pass. Only the newest position is computed; its query is "
                "compared with the keys of every position so far. The attention matrix gains **one row** per step, "
                "and the rows above it never change.")
    steps = st.slider("try it: decode steps (move it back and forth to replay them)", 1, 12, 5, key="lesson3_steps")
    s = greedy_run(PROMPTS[0]["prompt"], decode_steps=12)
    pre, t = s.traces[0], s.traces[steps]
    show_stage(s, steps)
    st.markdown(f"After prefill ({pre.q_len} positions) and {steps} decode steps, the last step fed **1 token** "
                f"(q_len = {t.q_len}) and attended to **{t.kv_len} positions** (kv_len): `[1, 1, {m.d_model}]` in, "
                f"against `[1, {pre.q_len}, {m.d_model}]` at prefill. It took {t.timing.describe()} (measured) for "
                f"{t.flops_estimate / 1e6:.1f} MFLOPs (estimate). " + bound_sentence(t, "A decode step"))
    z = fig.assembled_attention(s.traces[: steps + 1], 0, 0)
    st.plotly_chart(fig.attention_heatmap(z, labels(s)[: z.shape[0]], labels(s)[: z.shape[1]],
                                          "layer 0, head 0: the prefill square plus one row per decode step",
                                          scale=scale()), key="lesson3_att")


def lesson_kv_cache() -> None:
    st.markdown("A decode step needs the **keys and values** of every earlier position. They do not change once "
                "computed, so the **KV cache** keeps them, per layer, and each step adds only the new position's. "
                "Queries are not kept: a query is used once, by its own position, to look back; no later step ever "
                "needs an old query again.")
    steps = st.slider("try it: decode steps", 0, 20, 8, key="lesson4_steps")
    s = greedy_run(PROMPTS[0]["prompt"], decode_steps=steps)
    t = s.traces[-1]
    first = t.layers[0]
    batch, kv_heads, pos, head_dim = first.shapes["kv.keys"]
    elem = lm.elem_bytes
    formula = sum(2 * batch * kv_heads * x.cached * head_dim * elem for x in t.layers)
    same_shape = len({x.shapes["kv.keys"] for x in t.layers}) == 1
    st.markdown(f"After prefill and {steps} decode steps the cache holds **{pos} positions**"
                + ("" if same_shape else " in its full layers (the sliding-window layers hold fewer)")
                + f". Each layer stores keys and values of shape `[{batch}, {kv_heads}, {pos}, {head_dim}]` = "
                "`[batch, kv_head, pos, head_dim]`.")
    total = f"{formula:,}".replace(",", "{,}")  # LaTeX needs braces around a thousands comma
    if same_shape:
        st.latex(rf"2 \times {batch} \times {kv_heads} \times {pos} \times {head_dim} \times {elem}\,\text{{bytes}} "
                 rf"\times {m.layers}\ \text{{layers}} = {total}\ \text{{bytes}}")
    else:
        st.latex(rf"\sum_{{\text{{layer}}}} 2 \times {batch} \times {kv_heads} \times pos_{{\text{{kept}}}} \times "
                 rf"{head_dim} \times {elem}\,\text{{bytes}} = {total}\ \text{{bytes}}")
    st.markdown(f"Measured from the real tensors: **{t.kv_bytes:,} bytes** "
                f"({'the same' if t.kv_bytes == formula else 'different!'}). Each new token adds "
                f"{formula // max(1, pos):,} bytes while every layer still keeps every position.")
    proof = kv_reuse(lm, s.ids, s.cache)
    if proof is not None:
        st.markdown(f"**Checked on this run:** recomputing every one of the {proof['positions']} positions with no "
                    f"cache gives keys within **{proof['max_key_diff']:.1g}** and values within "
                    f"**{proof['max_value_diff']:.1g}** of what the cache holds (float rounding): the cached K and V "
                    "are exactly what a full recomputation would give. And every step's q was "
                    f"`[1, {m.heads}, 1, {m.head_dim}]` after prefill: one row, its own, used once.")
    st.dataframe(fig.kv_frame(t), hide_index=True, width="stretch")
    st.plotly_chart(fig.kv_growth_figure(s.traces, scale=scale()), key="lesson4_growth")


def lesson_no_cache() -> None:
    st.markdown("Without the cache nothing is kept between steps, so every decode step recomputes keys and values "
                "for **all** positions so far. The tokens come out the same; the work does not. On the stage, the "
                "red columns and rows are work done again.")
    steps = st.slider("try it: new tokens", 5, 60, 30, 5, key="lesson5_steps")
    rep = compare(lm, PROMPTS[0]["prompt"], steps, record=False, stop_on_eos=False)
    cache, nocache = rep["steppers"]["cache"].traces, rep["steppers"]["nocache"].traces
    show_stage(greedy_run(PROMPTS[0]["prompt"], decode_steps=5, use_cache=False), 5)
    sum_q = {name: sum(t.q_len for t in tr) for name, tr in (("cache", cache), ("nocache", nocache))}
    flops = {name: sum(t.flops_estimate for t in tr) for name, tr in (("cache", cache), ("nocache", nocache))}
    sp = rep["speedup"]
    st.markdown(f"Same tokens with and without the cache: **{'yes' if rep['identical'] else 'no'}** (largest logit "
                f"difference {rep['max_logit_diff']:.1g}). Over {len(cache)} forward passes the cached run computed "
                f"**{sum_q['cache']} positions**; the uncached one **{sum_q['nocache']}**. Total work (estimate): "
                f"{flops['nocache'] / flops['cache']:.1f}× more without the cache. Measured decode time: "
                f"{sp['nocache_total_ms']:.0f} ms without the cache, {sp['cache_total_ms']:.0f} ms with it "
                f"(×{sp['total_ratio']:.1f}).")
    st.plotly_chart(fig.work_per_step_figure(cache, nocache, scale=scale()), key="lesson5_work")
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
    st.plotly_chart(fig.next_token_figure(t, scale=scale()), key="lesson6_next")
    st.markdown(plain(f"Before the warpers the most likely next token is {fig.show_piece(top.token)} (logit "
                      f"{top.logit:.2f}) at {top.p_before:.1%}; after them it has {top.p_after:.1%}, and {kept} of the "
                      f"{len(t.top)} shown candidates can still be drawn. This draw ({t.rule}) picked "
                      f"{fig.show_piece(t.token)}."))
    eos = Stepper(lm, "Once upon a time", max_new_tokens=400)
    eos.run()
    st.markdown(f"A run **stops** at the end-of-text token (id {lm.tokenizer.eos_token_id}), after the maximum number "
                f"of new tokens, when the new text contains a stop string, or when the context of {m.max_positions} "
                f"positions is full. Greedy from 'Once upon a time' (up to 400 tokens) stopped after "
                f"**{len(eos.generated_ids)} tokens**, reason: **{eos.stop_reason}**.")


def lesson_batches() -> None:
    st.markdown("Servers answer many prompts at once by stacking them into a **batch**: one forward pass, "
                "`[batch, pos, d_model]`. Prompts have different lengths, so the short ones are **padded**, on the "
                "**left**: then every row's last position is a real token, the next-token logits of all rows sit in "
                "the same column, and each decode step appends one column to every row. The **attention mask** "
                "marks padding with 0 so no real token ever attends to it.")
    a = st.text_input("try it: first prompt", "Tom had a red ball.", key="lesson7_a")
    b = st.text_input("try it: second prompt", PROMPTS[1]["prompt"], key="lesson7_b")
    try:
        run = run_batch(lm, [a, b], new_tokens=9)
    except DecodeLabError as e:
        error(str(e))
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
                                          fig.axis_labels(pieces), f"batch row {short}, layer 0, head 0",
                                          scale=scale()), key="lesson7_att")
    st.caption("The PAD rows at the top are the padding positions' own queries: they attend somewhere (every row of "
               "a softmax sums to 1), but their outputs are never used.")
    st.dataframe(pd.DataFrame([(name, str(list(shape))) for name, shape in run.shapes],
                              columns=["tensor", "shape [batch, ...]"]), hide_index=True)
    for i, (prompt, tokens) in enumerate(zip(run.prompts, run.generated)):
        solo = Stepper(lm, prompt, max_new_tokens=len(tokens), stop_on_eos=False, record=False)
        solo.run()
        st.markdown(plain(f"Row {i}: {run.texts[i]}") + " — same tokens as running it alone: "
                    f"**{'yes' if list(tokens) == solo.generated_ids else 'no'}**")


def lesson_scale() -> None:
    st.markdown("The cache that was a few kilobytes here is the main memory cost of serving big models. The formula "
                "is the same: 2 × layers × kv_heads × head_dim × bytes per element, per token (a sliding-window "
                "layer stops growing at its window).")
    s = greedy_run(PROMPTS[0]["prompt"], decode_steps=4)
    t = s.traces[-1]
    live = t.kv_bytes / t.kv_len
    tokens = st.select_slider("try it: context length", [1024, 4096, 8192, 32768], 8192, key="lesson8_tokens")
    rows = []
    for name in ["Llama-2-7b", "Llama-3-8B", "Llama-2-70b", "Llama-3-70B", "Gemma-2-9b"]:
        arch = kvcalc.from_table(name)
        rows.append({"model": name, "attention": f"{arch.attention} ({arch.heads} query / {arch.kv_heads} KV heads)"
                     + (f", {arch.sliding_layers} sliding layers" if arch.sliding_layers else ""),
                     "KV per token (fp16, estimate)": kvcalc.human(arch.kv_bytes_per_token(2)),
                     f"KV for {tokens:,} tokens": kvcalc.human(arch.kv_bytes(tokens)),
                     f"same model as MHA, {tokens:,} tokens": kvcalc.human(arch.as_mha().kv_bytes(tokens))})
    st.markdown(f"Your live model stores **{live:,.0f} bytes per token** (measured, {lm.dtype_name}). Published "
                f"configurations, computed from their figures (estimates, fp16, batch 1):")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    l2, l3 = kvcalc.from_table("Llama-2-70b"), kvcalc.from_table("Llama-3-8B")
    st.markdown(f"Grouped-query attention shares each K/V head among several query heads: Llama-2-70B's "
                f"{l2.heads} query heads use {l2.kv_heads} K/V heads, a cache {l2.heads // l2.kv_heads}× smaller "
                f"than MHA; Llama-3-8B's cache is {l3.heads // l3.kv_heads}× smaller than it would be with MHA.")
    big = kvcalc.from_table("Llama-3-70B")
    weights = kvcalc.weight_bytes(big, 2)
    per_sequence = big.kv_bytes(tokens)
    gpus = int(-(-weights // 80e9)) + 1  # enough 80 GB cards for the weights, plus one for caches
    fit = kvcalc.largest_fit(big, gpus * 80e9, 2, 2, tokens)
    st.caption(f"Why it matters: Llama-3-70B's fp16 weights alone are {kvcalc.human(weights)}, more than one 80 GB "
               f"accelerator holds. On {gpus} of them ({gpus * 80} GB), what the weights leave holds the caches of "
               f"**{fit['max_batch']:,} sequences** of {tokens:,} tokens ({kvcalc.human(per_sequence)} each, estimate; "
               "activations not counted).")
    st.markdown("What comes next:\n"
                "- **Paged KV cache** (vLLM's PagedAttention): store the cache in fixed-size blocks like virtual "
                "memory pages, so many sequences share GPU memory without fragmentation.\n"
                "- **Speculative decoding** (next lesson, and its own page): guess several tokens cheaply and check "
                "them all in one pass.\n"
                "- **Quantized KV cache**: store keys and values in 8 or 4 bits to fit longer contexts "
                "(the Scale page has the sizes).")


def lesson_speculative() -> None:
    from ui.speculative import speculative_lesson

    speculative_lesson(lm)


LESSONS = {
    "1. Text in, tokens out": lesson_tokens,
    "2. Prefill: the whole prompt at once": lesson_prefill,
    "3. Decode: one token per step": lesson_decode,
    "4. The KV cache": lesson_kv_cache,
    "5. Without the cache": lesson_no_cache,
    "6. Choosing the next token": lesson_sampling,
    "7. Batches and padding": lesson_batches,
    "8. Scale: the cache of big models": lesson_scale,
    "9. Speculative decoding": lesson_speculative,
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
        warning(f"link parameter lesson={wanted} ignored: there are lessons 1 to {len(TITLES)}")
c = st.container(horizontal=True, vertical_alignment="bottom")
lesson = c.selectbox("lesson", TITLES, key="lesson_pick", width=420)
st.query_params["lesson"] = str(TITLES.index(lesson) + 1)  # the link reopens this lesson
c.button("Previous", on_click=move, args=(-1,), disabled=lesson == TITLES[0], key="lesson_prev", shortcut="left",
         help="Previous lesson (←)")
c.button("Next", on_click=move, args=(1,), disabled=lesson == TITLES[-1], key="lesson_next", shortcut="right",
         help="Next lesson (→)")
st.header(lesson)
try:
    LESSONS[lesson]()
except DecodeLabError as e:
    error(str(e))
