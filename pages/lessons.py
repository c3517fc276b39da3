"""Lessons: the ideas in order, each with the live views of the real model and a control to try.

Every number a lesson quotes is computed from a run made while the page draws, and every
label a figure could contradict ("compute-bound", "climbs") is computed from that figure's
own numbers; the text around them is only the explanation.
"""

import numpy as np
import streamlit as st

from engine import DecodeLabError, Sampling, Stepper, compare
from engine.measure import kvcalc
from engine.measure import noise, roofline
from engine.draw import figures as fig
from engine.draw.request import request_html
from engine.generate.batch import run_batch, same_as_alone
from engine.generate.compare import kv_reuse
from engine.generate.predict import ARTICLE_PROMPT, next_word_odds, until_end
from engine.draw.stage import caption, stage_html, stage_svg
from engine.generate.loop import token_pieces
from engine.load.load import bundled_models
from engine.measure.request import request_timeline
from engine.units import human_bytes
from ui.frame import frame
from ui.ladder import lesson_claim
from ui.model import device_roof
from ui.presets import PROMPTS
from ui.style import scale
from ui.text import error, plain, warning

st.title("Lessons: how a language model generates text")
settings, lm = frame(__file__, need_model=True)
spec = lm.spec
MODEL = (settings.source, settings.device, settings.dtype)  # which shared model: every cached run below is keyed by it
PROMPT_TITLES = [p["title"] for p in PROMPTS]
ENDING = next(p["prompt"] for p in PROMPTS if "end-of-text" in p["title"])  # a story the model ends by itself
BUNDLED = {"default", *bundled_models()}  # trained here on TinyStories (assets/models/*/README.md)


def prompt_picker(key: str, default: int = 0) -> str:
    title = st.selectbox("try it: the prompt", PROMPT_TITLES, index=default, key=key)
    return next(p["prompt"] for p in PROMPTS if p["title"] == title)


# Every run a lesson talks about is made once per (model, settings) and kept: a rerun, a slider moved back, another
# student on the same lesson, all read the same measured run. Stored runs are only read, never stepped again.


@st.cache_resource(max_entries=48, show_spinner="Running the model once for this lesson (it is kept)…")
def _greedy_run(_lm, model: tuple, prompt: str, decode_steps: int, use_cache: bool, repeats: int | None) -> Stepper:
    run = Stepper(_lm, prompt, max_new_tokens=decode_steps + 1, stop_on_eos=False, use_cache=use_cache,
                  repeats=repeats)
    run.run()
    return run


def greedy_run(prompt: str, decode_steps: int, use_cache: bool = True, repeats: int | None = None) -> Stepper:
    """Prefill, then `decode_steps` greedy decode steps: the live run a lesson talks about (made once, kept).
    repeats=1 times each pass once (its stage says "one run"), for a run drawn rather than measured."""
    return _greedy_run(lm, MODEL, prompt, decode_steps, use_cache, repeats)


@st.cache_resource(max_entries=16, show_spinner=False)
def _proof(_lm, model: tuple, prompt: str, decode_steps: int) -> dict | None:
    run = greedy_run(prompt, decode_steps)
    return kv_reuse(_lm, run.ids, run.cache)


@st.cache_resource(max_entries=8, show_spinner="Running both modes once (kept for every rerun)…")
def _compare(_lm, model: tuple, prompt: str, new_tokens: int, attempt: int) -> dict:
    """Both modes, measured in alternation; attempt 1 is the one re-measurement a flipped comparison gets."""
    return compare(_lm, prompt, new_tokens, record=False, stop_on_eos=False)


@st.cache_resource(max_entries=64, show_spinner=False)
def _sampled_prefill(_lm, model: tuple, prompt: str, sampling: Sampling):
    return Stepper(_lm, prompt, sampling=sampling, max_new_tokens=1).prefill()


@st.cache_resource(max_entries=4, show_spinner=False)
def _endings() -> dict:
    """model -> how a greedy story from ENDING stopped: filled once, with a progress bar (see lesson 6)."""
    return {}


@st.cache_resource(max_entries=16, show_spinner="Running the batch once (kept for every rerun)…")
def _batch(_lm, model: tuple, prompts: tuple[str, ...]):
    run = run_batch(_lm, list(prompts), new_tokens=9)
    return run, same_as_alone(_lm, run)


@st.cache_resource(max_entries=4, show_spinner="Timing one request, step by step, on this device (once)…")
def _request(_lm, model: tuple, prompt: str):
    return request_timeline(_lm, prompt)


@st.cache_resource(max_entries=4, show_spinner=False)
def _article_odds(_lm, model: tuple):
    return next_word_odds(_lm)


def labels(run: Stepper) -> list[str]:
    return fig.axis_labels(token_pieces(lm.tokenizer, run.ids[0].tolist()))


def show_stage(run: Stepper, step: int, layer: int = 0) -> None:
    t = run.traces[step]
    st.html(stage_html(stage_svg(t, run.pieces(), run.prompt_len, layer=layer), caption(t)))


def busy(traces) -> None:
    """The measured times a lesson quotes, when the server's noise contradicts it (engine.measure.noise)."""
    note = noise.latency_note(traces)
    if note:
        st.warning(note, icon=":material/speed:")


def bound_sentence(t, what: str) -> str:
    """Where the roofline puts this step (its intensity against this device's ridge, and an H100's), then what
    its measured time shows: compute-, memory- or overhead-bound, from the time against both bounds."""
    here, h100 = device_roof(), roofline.h100()
    v = roofline.step_verdict(t, here)
    return (f"{what} does about **{t.intensity_estimate:.1f} FLOPs per byte** it moves (estimate). This device's "
            f"measured ridge is {here.ridge:.1f} FLOP/byte, so the roofline puts it on "
            f"**{roofline.side(t.intensity_estimate, here)}** (on an {h100.name.split(' (')[0]}, ridge "
            f"{h100.ridge:.0f}: {roofline.side(t.intensity_estimate, h100)}). Measured, it took "
            f"{t.forward_ms:.3g} ms against a memory bound of {v['memory_ms']:.3g} ms and a compute bound of "
            f"{v['compute_ms']:.3g} ms: **{v['label']}**.")


def physics(phase: str) -> None:
    """The lesson's claim in the size ladder's measured numbers: the bundled model is too small to show it."""
    said = lesson_claim(lm, phase)
    if said:
        st.markdown(said)


# ------------------------------------------------------------------ the lessons


def lesson_tokens() -> None:
    st.markdown("A model never sees letters. A **tokenizer** cuts the text into pieces from a fixed vocabulary and "
                "replaces each piece by its number (its **id**). The model reads ids and writes ids; turning the "
                "ids back into text is **detokenizing**.")
    left, right = st.columns([1, 2], vertical_alignment="bottom")
    text = left.text_input("try it: type any text", "Today's weather is so", key="lesson1_text")
    if not text:
        st.info("Type some text to see its tokens.")
        return
    ids = lm.tokenizer(text)["input_ids"]
    bos = lm.tokenizer.bos_token_id
    right.html(fig.token_chips_html(list(zip(ids, token_pieces(lm.tokenizer, ids))), [], set()))
    back = lm.tokenizer.decode(ids, skip_special_tokens=True)
    lead = (f" The first, id {ids[0]}, is the start marker the tokenizer adds." if ids and ids[0] == bos else "")
    st.markdown(f"**{len(text)} characters became {len(ids)} tokens** out of a vocabulary of {spec.vocab:,}.{lead} "
                "Decoding the ids gives back " + ("the same text." if back == text else plain(
                    f"not exactly the same text (the tokenizer normalised it): \"{back}\".")))
    st.markdown("**One request, start to finish**, timed on this server's device:")
    st.html(request_html(_request(lm, MODEL, ARTICLE_PROMPT)))
    st.caption("The text is tokenized on the CPU, the ids are copied to the device, one prefill pass (the initiation "
               "phase) and one decode pass per new token (the generation phase) run there, the new ids are copied "
               "back and detokenized. Loading the weights happens once per server.")
    odds = _article_odds(lm, MODEL)
    top = ", ".join(f"{fig.show_piece(piece)} ({p:.0%})" for piece, p in odds["top"])
    said = "; ".join(f"'{w}' {o['p'] * 100:.2g}% (rank {o['rank']:,})" for w, o in odds["words"].items())
    why = (" It was trained only on TinyStories, short children's stories: it has read 'was so big' and 'so happy' in "
           "thousands of them, and hardly any weather reports." if settings.source in BUNDLED else "")
    st.markdown(plain(f"The articles' example: after \"{ARTICLE_PROMPT}\" a model trained on web text predicts "
                      f"'nice' or 'warm'. This model predicts {top}; the articles' words get {said}.{why}"))


def lesson_prefill() -> None:
    st.markdown("**Prefill** (the *initiation phase*) is the first forward pass: every prompt position goes "
                "through the model at once. "
                "Each position's query is compared with the keys of itself and every earlier position; the "
                "**causal mask** hides later positions, because when the model writes a token the future does "
                "not exist yet. The stage shows s rows going in together, and K and V of all of them written to "
                "the cache at once.")
    prompt = prompt_picker("lesson2_prompt", default=2)
    run = greedy_run(prompt, decode_steps=1)
    pre, dec = run.traces[0], run.traces[1]
    show_stage(run, 0)
    rows, att = fig.attention_rows(pre, 0, 0)
    above = float(np.nansum(np.triu(np.nan_to_num(att, nan=0.0), 1)))
    st.markdown(f"This prompt is **{pre.q_len} tokens**, so prefill pushed all {pre.q_len} through at once: the rows "
                f"entering each block are `[1, {pre.q_len}, {spec.d_model}]` = `[batch, pos, d_model]`. Every weight "
                f"matrix multiplies all {pre.q_len} rows at once, a **matrix-matrix** product: each weight read from "
                f"memory serves {pre.q_len} rows of arithmetic. In the heatmap (layer 0, head 0) every row sums to 1, "
                f"and the weights above the diagonal add up to **{above:.1g}**: the mask at work (drawn grey: masked, "
                "not zero).")
    st.plotly_chart(fig.attention_heatmap(att, labels(run)[: pre.kv_len], labels(run)[: pre.kv_len],
                                          "layer 0, head 0: prefill, causal", scale=scale()), key="lesson2_att")
    st.markdown(bound_sentence(pre, "This prefill") + f" The decode step after it: {dec.intensity_estimate:.1f} "
                "FLOPs per byte. A longer prompt does more arithmetic per weight it reads, and moves right.")
    physics("prefill")
    busy(run.traces)


def lesson_decode() -> None:
    st.markdown("**Decode** (the *generation phase*) adds one token per forward pass. Only the newest position is "
                "computed; its query is "
                "compared with the keys of every position so far. The attention matrix gains **one row** per step, "
                "and the rows above it never change.")
    steps = st.slider("try it: decode steps (move it back and forth to replay them)", 1, 12, 5, key="lesson3_steps")
    run = greedy_run(PROMPTS[0]["prompt"], decode_steps=12)
    pre, t = run.traces[0], run.traces[steps]
    show_stage(run, steps)
    st.markdown(f"After prefill ({pre.q_len} positions) and {steps} decode steps, the last step fed **1 token** "
                f"(q_len = {t.q_len}) and attended to **{t.kv_len} positions** (kv_len): `[1, 1, {spec.d_model}]` in, "
                f"against `[1, {pre.q_len}, {spec.d_model}]` at prefill. Every weight matrix now multiplies a single "
                "row, a **matrix-vector** product: each weight is read from memory for one row of arithmetic. It took "
                f"{t.timing.describe()} (measured) for {t.flops_estimate / 1e6:.1f} MFLOPs (estimate). "
                + bound_sentence(t, "A decode step"))
    physics("decode")
    busy(run.traces[: steps + 1])
    z = fig.assembled_attention(run.traces[: steps + 1], 0, 0)
    st.plotly_chart(fig.attention_heatmap(z, labels(run)[: z.shape[0]], labels(run)[: z.shape[1]],
                                          "layer 0, head 0: the prefill square plus one row per decode step",
                                          scale=scale()), key="lesson3_att")


def lesson_kv_cache() -> None:
    st.markdown("A decode step needs the **keys and values** of every earlier position. They do not change once "
                "computed, so the **KV cache** keeps them, per layer, and each step adds only the new position's. "
                "Queries are not kept: a query is used once, by its own position, to look back; no later step ever "
                "needs an old query again.")
    steps = st.slider("try it: decode steps", 0, 20, 8, key="lesson4_steps")
    run = greedy_run(PROMPTS[0]["prompt"], decode_steps=steps)
    t = run.traces[-1]
    batch, kv_heads, pos, head_dim = t.layers[0].shapes["kv.keys"]
    elem = lm.elem_bytes
    formula = spec.kv_bytes(t.kv_len, batch, elem)  # the ModelSpec's formula, from the config
    st.markdown(f"After prefill and {steps} decode steps the cache holds **{pos} positions**"
                + ("" if not spec.sliding_layers else " in its full layers (the sliding-window layers hold fewer)")
                + f". Each layer stores keys and values of shape `[{batch}, {kv_heads}, {pos}, {head_dim}]` = "
                "`[batch, kv_head, pos, head_dim]`.")
    st.latex(kvcalc.formula_latex(spec, t.kv_len, batch, elem))
    st.markdown(f"Measured from the real tensors: **{t.kv_bytes:,} bytes** "
                f"({'the same' if t.kv_bytes == formula else 'different!'}). Each new token adds "
                f"{spec.kv_bytes_per_token(elem):,.0f} bytes while every layer still keeps every position.")
    proof = _proof(lm, MODEL, PROMPTS[0]["prompt"], steps)
    if proof is not None:
        st.markdown(f"**Checked on this run:** recomputing every one of the {proof['positions']} positions with no "
                    f"cache gives keys within **{proof['max_key_diff']:.1g}** and values within "
                    f"**{proof['max_value_diff']:.1g}** of what the cache holds (float rounding): the cached K and V "
                    "are exactly what a full recomputation would give. And every step's q was "
                    f"`[1, {spec.heads}, 1, {spec.head_dim}]` after prefill: one row, its own, used once.")
    st.table(fig.kv_frame(t).set_index("layer"))
    st.plotly_chart(fig.kv_growth_figure(run.traces, scale=scale()), key="lesson4_growth")


def lesson_no_cache() -> None:
    st.markdown("Without the cache nothing is kept between steps, so every decode step recomputes keys and values "
                "for **all** positions so far. The tokens come out the same; the work does not. On the stage, the "
                "red columns and rows are work done again.")
    steps = st.slider("try it: decode steps (the stage shows the last one)", 5, 60, 30, 5, key="lesson5_steps")
    prompt = PROMPTS[0]["prompt"]
    rep = _compare(lm, MODEL, prompt, steps + 1, 0)  # prefill + `steps` decode steps, each mode
    cache, nocache = rep["steppers"]["cache"].traces, rep["steppers"]["nocache"].traces
    note = noise.compare_note(cache, nocache)
    if note:  # a busy server flipped the comparison: measure once more (a second or two), then say what remains
        rep = _compare(lm, MODEL, prompt, steps + 1, 1)
        cache, nocache = rep["steppers"]["cache"].traces, rep["steppers"]["nocache"].traces
        note = noise.compare_note(cache, nocache)
    # the slider's last step, drawn: its passes timed once each (the measured comparison is `rep`, above)
    show_stage(greedy_run(prompt, decode_steps=steps, use_cache=False, repeats=1), steps)
    sum_q = {name: sum(t.q_len for t in tr) for name, tr in (("cache", cache), ("nocache", nocache))}
    flops = {name: sum(t.flops_estimate for t in tr) for name, tr in (("cache", cache), ("nocache", nocache))}
    sp = rep["speedup"]
    st.markdown(f"Same tokens with and without the cache: **{'yes' if rep['identical'] else 'no'}** (largest logit "
                f"difference {rep['max_logit_diff']:.1g}). Over {len(cache)} forward passes (prefill and {steps} "
                f"decode steps) the cached run computed **{sum_q['cache']} positions**; the uncached one "
                f"**{sum_q['nocache']}**. Total work (estimate): {flops['nocache'] / flops['cache']:.1f}× more without "
                f"the cache. Measured decode time: {sp['nocache_total_ms']:.0f} ms without the cache, "
                f"{sp['cache_total_ms']:.0f} ms with it (×{sp['total_ratio']:.1f}).")
    st.plotly_chart(fig.work_per_step_figure(cache, nocache, scale=scale(), note=note), key="lesson5_work")
    if note:
        st.warning(note + " (Measured twice.)", icon=":material/speed:")
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
    top_k = c[1].number_input("top-k (0 = off)", 0, spec.vocab, 0, key="lesson6_k")
    top_p = c[2].slider("top-p", 0.05, 1.0, 1.0, 0.05, key="lesson6_p")
    rep = c[3].slider("repetition penalty", 1.0, 2.0, 1.0, 0.1, key="lesson6_r")
    seed = c[4].number_input("seed", 0, 10_000, 0, key="lesson6_seed")
    sampling = Sampling(greedy=False, temperature=temperature, top_k=int(top_k), top_p=top_p,
                        repetition_penalty=rep, seed=int(seed))
    t = _sampled_prefill(lm, MODEL, PROMPTS[2]["prompt"], sampling)  # one pass per (settings, seed), kept
    top = t.top[0]
    kept = sum(1 for c_ in t.top if c_.p_after > 0)
    st.plotly_chart(fig.next_token_figure(t, scale=scale()), key="lesson6_next")
    st.markdown(plain(f"Before the warpers the most likely next token is {fig.show_piece(top.token)} (logit "
                      f"{top.logit:.2f}) at {top.p_before:.1%}; after them it has {top.p_after:.1%}, and {kept} of the "
                      f"{len(t.top)} shown candidates can still be drawn. This draw ({t.rule}) picked "
                      f"{fig.show_piece(t.token)}."))
    ending = _endings().get(MODEL)
    if ending is None:  # once per model and server; every later rerun reads it back
        limit = 400
        bar = st.progress(0.0, text="Generating a story until the model ends it (once, then kept)…")
        ending = until_end(lm, ENDING, limit, on_step=lambda n: bar.progress(
            min(1.0, n / limit), text=f"Generating a story until the model ends it: {n} tokens so far…"))
        _endings()[MODEL] = ending
        bar.empty()
    st.markdown(f"A run **stops** at the end-of-text token (id {lm.tokenizer.eos_token_id}), after the maximum number "
                f"of new tokens, when the new text contains a stop string, or when the context of "
                f"{spec.max_positions} positions is full. Greedy from the story below (up to {ending['max_new_tokens']} "
                f"tokens) stopped after **{ending['tokens']} tokens**, reason: **{ending['stop_reason']}**"
                + (": the model wrote end-of-text itself." if ending["stop_reason"] == "eos" else "."))
    st.text(ending["prompt"] + ending["text"])


def lesson_batches() -> None:
    st.markdown("Servers answer many prompts at once by stacking them into a **batch**: one forward pass, "
                "`[batch, pos, d_model]`. Prompts have different lengths, so the short ones are **padded**, on the "
                "**left**: then every row's last position is a real token, the next-token logits of all rows sit in "
                "the same column, and each decode step appends one column to every row. The **attention mask** "
                "marks padding with 0 so no real token ever attends to it.")
    a = st.text_input("try it: first prompt", "Tom had a red ball.", key="lesson7_a")
    b = st.text_input("try it: second prompt", PROMPTS[1]["prompt"], key="lesson7_b")
    try:
        run, alone = _batch(lm, MODEL, (a, b))
    except DecodeLabError as e:
        error(str(e))
        return
    short = int(np.argmax(run.pad_counts))
    st.html(fig.padded_batch_html(run.pieces, run.input_ids, run.attention_mask))
    pad_id, bos_id = int(run.input_ids[short, 0]), lm.tokenizer.bos_token_id
    if pad_id == bos_id:
        st.caption(f"Padding reuses id {pad_id}, the start marker's id (this tokenizer has no separate pad token): the "
                   "ids alone cannot tell padding from a real token; only the attention mask can.")
    st.markdown(f"Row {short} got **{run.pad_counts[short]} padding positions**. Its attention (layer 0, head 0) "
                f"below: the padded columns are masked, drawn grey like every masked pair (masked, not zero). Over "
                f"every layer and head, the largest weight a real token gave a padded one is "
                f"**{run.max_attention_on_padding():.1g}**.")
    pieces = [p or "PAD" for p in run.pieces[short]]
    st.plotly_chart(fig.attention_heatmap(run.attention(short, 0, 0), fig.axis_labels(pieces),
                                          fig.axis_labels(pieces), f"batch row {short}, layer 0, head 0",
                                          scale=scale()), key="lesson7_att")
    st.caption("The PAD rows at the top are the padding positions' own queries: the mask hides every key from "
               "them (all grey), and whatever they compute is never used.")
    st.dataframe(fig.batch_shapes_frame(run.shapes), hide_index=True)
    for i, same in enumerate(alone):  # engine.generate.batch.same_as_alone: each prompt decoded alone
        st.markdown(plain(f"Row {i}: {run.texts[i]}") + f" — same tokens as running it alone: **{'yes' if same else 'no'}**")


def lesson_scale() -> None:
    st.markdown("The cache that was a few kilobytes here is the main memory cost of serving big models. The formula "
                "is the same: 2 × layers × kv_heads × head_dim × bytes per element, per token (a sliding-window "
                "layer stops growing at its window).")
    t = greedy_run(PROMPTS[0]["prompt"], decode_steps=4).traces[-1]
    live = t.kv_bytes / t.kv_len
    tokens = st.select_slider("try it: context length", [1024, 4096, 8192, 32768], 8192, key="lesson8_tokens")
    st.markdown(f"Your live model stores **{live:,.0f} bytes per token** (measured, {lm.dtype_name}). Published "
                f"configurations, computed from their figures (estimates, fp16, batch 1):")
    st.dataframe(kvcalc.compare_frame(["Llama-2-7b", "Llama-3-8B", "Llama-2-70b", "Llama-3-70B", "Gemma-2-9b"], tokens),
                 hide_index=True, width="stretch")
    l2, l3 = kvcalc.from_table("Llama-2-70b"), kvcalc.from_table("Llama-3-8B")
    st.markdown(f"Grouped-query attention shares each K/V head among several query heads: Llama-2-70B's "
                f"{l2.heads} query heads use {l2.kv_heads} K/V heads, a cache {l2.heads // l2.kv_heads}× smaller "
                f"than MHA; Llama-3-8B's cache is {l3.heads // l3.kv_heads}× smaller than it would be with MHA.")
    cards = kvcalc.cards_for(kvcalc.from_table("Llama-3-70B"), tokens)  # enough 80 GB cards, plus one for caches
    st.caption(f"Why it matters: Llama-3-70B's fp16 weights alone are {human_bytes(cards['weights'])}, more than one "
               f"80 GB accelerator holds. On {cards['cards']} of them ({cards['cards'] * 80} GB), what the weights "
               f"leave holds the caches of **{cards['max_batch']:,} sequences** of {tokens:,} tokens "
               f"({human_bytes(cards['per_sequence'])} each, estimate; activations not counted).")
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


def lesson_serving() -> None:
    from ui.serving import serving_lesson

    serving_lesson(lm, scale())


LESSONS = {
    "1. Text in, tokens out": lesson_tokens,
    "2. Prefill (initiation phase): the whole prompt at once": lesson_prefill,
    "3. Decode (generation phase): one token per step": lesson_decode,
    "4. The KV cache": lesson_kv_cache,
    "5. Without the cache": lesson_no_cache,
    "6. Choosing the next token": lesson_sampling,
    "7. Batches and padding": lesson_batches,
    "8. Scale: the cache of big models": lesson_scale,
    "9. Speculative decoding": lesson_speculative,
    "10. Serving many requests: batching and a paged cache": lesson_serving,
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
