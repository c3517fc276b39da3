"""Race: the same prompt and seed with the KV cache on and off, measured, then played back at measured speed."""

import html
import time

import streamlit as st

from drawing import caveats
from drawing.differences import logit_gap_words
from drawing.palette import show_piece
from engine import DecodeLabError
from engine.generate.compare import compare
from engine.timing import now
from physics import roofline
from physics.machine import release_memory
from topics.race import draw as race_draw
from topics.race import measure as race
from ui.charts import chart
from ui.link_codec import MAX_PROMPT_CHARS
from ui.links import write_link
from ui.model import device_roof
from ui.presets import PROMPTS
from ui.setup import page_setup
from ui.style import scale
from ui.text import error, plain, warning


def show() -> None:
    """The race page, drawn (pages/race.py is its door)."""
    st.title("Race: KV cache on vs off")
    settings, lm = page_setup("race", need_model=True)
    OWN = "this model"
    RUNGS = race.race_sizes(lm)  # grown sizes on a CPU; published shapes, on the lean path, on a GPU
    st.caption("Same prompt, seed and sampling in both runs, **measured** in alternation (one step each, so neither has "
               "the machine to itself), then **played back** at each run's measured speed.")

    wanted = st.session_state.pop("race_wanted", None)  # a link's prompt, tokens and size, checked here
    if wanted is not None:
        if wanted["prompt"] is not None:  # its preset, or its own words in the preset box's prompt
            same = next((p["title"] for p in PROMPTS if p["prompt"] == wanted["prompt"]), None)
            st.session_state["race_preset"] = same or st.session_state.get("race_preset", PROMPTS[0]["title"])
            st.session_state[f"race_prompt_{st.session_state['race_preset']}"] = wanted["prompt"]
        if wanted["size"] in RUNGS:
            st.session_state["race_size"] = wanted["size"]
        elif wanted["size"] is not None:
            warning(f"link parameter size={wanted['size'][:40]!r} ignored: the sizes here are {', '.join(RUNGS)}")
        if wanted["tokens"] is not None:
            st.session_state["race_steps"] = wanted["tokens"]  # clamped below to the room the prompt leaves
    bar = st.container(horizontal=True, vertical_alignment="bottom", gap="small")  # one row: the proof fits under it
    preset = bar.selectbox("preset prompt", [p["title"] for p in PROMPTS], key="race_preset",
                           persist_state="session", width=330)
    prompt = st.text_area("prompt", next(p["prompt"] for p in PROMPTS if p["title"] == preset), key=f"race_prompt_{preset}",
                          persist_state="session",
                          height=68, label_visibility="collapsed")
    try:
        room = max(2, lm.spec.max_positions - len(lm.tokenizer(prompt)["input_ids"]))
    except Exception:  # noqa: BLE001 - an unreadable prompt: the race itself will say why
        room = 2
    if st.session_state.get("race_steps", 0) > min(room, 2048):  # a link's tokens, past what this prompt leaves
        st.session_state["race_steps"] = min(room, 2048)
    steps = bar.number_input("tokens", 2, min(room, 2048), min(200, room), key="race_steps",
                             persist_state="session", width=130,
                             help=f"Up to the model's context limit ({lm.spec.max_positions} positions). At 200 the "
                                  "growth without the cache is visible on a laptop CPU.")
    size = bar.selectbox("model size", [OWN, *RUNGS], key="race_size", persist_state="session", width=200,
                         format_func=lambda x: x if x == OWN else f"{x}: random weights",
                         help="A bigger model, built from a config with random weights (no download): for timing "
                              "only, its tokens are noise. At a real size the cache buys more. On a GPU it is a "
                              "published model's shape, timed on the compiled path (the readable one is launch-bound "
                              "there), greedy.")
    speed = bar.select_slider("playback speed", [0.25, 0.5, 1.0, 2.0, 4.0], 1.0, key="race_speed",
                              persist_state="session", width=220,
                              format_func=lambda x: f"{x:g}× real time")
    start = bar.button("Start race", type="primary", key="race_start")
    write_link(settings, prompt=prompt if len(prompt) <= MAX_PROMPT_CHARS else None, tokens=int(steps),
               size=None if size == OWN else size)  # a link opens this race's settings (the race is run again)


    def measure() -> None:
        st.session_state.pop("race_result", None)
        bar = st.progress(0.0, text="measuring both runs, alternating steps…")
        done = {"cache": 0, "nocache": 0}

        def on_step(mode, t):
            done[mode] += 1
            bar.progress(min(1.0, sum(done.values()) / (2 * steps)),
                         text=f"measuring: cache on {done['cache']}/{steps}, cache off {done['nocache']}/{steps} tokens")

        try:
            if size == OWN:
                report = race.RaceReport.of(compare(lm, prompt, int(steps), sampling=settings.sampling,
                                                    on_step=on_step, stop_on_eos=False))
            else:
                with st.spinner(f"Building {size} from its config, random weights (no download)…"):
                    report = race.race_at(lm, size, prompt, int(steps), settings.sampling, on_step)
        except DecodeLabError as e:
            error(str(e))
            st.stop()
        df = race.race_frame(report)
        note = caveats.compare_note(report.runs["cache"].records, report.runs["nocache"].records)
        report = report.without_runs()  # traces are summarised in df; free them once the noise rule has read them
        release_memory()
        summary = race.summary(report, df)
        rule = race.cache_rule(df, summary.speedup.total_ratio, device_roof(), roofline.h100())  # the roof it ran on
        st.session_state["race_result"] = race.RaceResult(
            df=df, summary=summary, prompt=prompt, texts=report.text, note=note, at=report.at, rule=rule,
            how=report.how, precision=race.precision_note(report.dtype or lm.dtype_name))
        st.session_state["race_play"] = True
        bar.empty()


    def playback(result: race.RaceResult, speed: float) -> None:
        """Both runs side by side, each advancing at its own measured wall-clock speed."""
        df = result.df
        # two rows: the lanes (name, bar, tokens and clock), then the texts, so that on a phone, where columns
        # stack, both lanes are on screen together and a growing text pushes neither of them down
        lanes, texts = st.columns(2), st.columns(2)
        boxes = {}
        for lane, text, mode in zip(lanes, texts, race_draw.MODES):
            name, colour = race_draw.MODES[mode]
            lane.markdown(f"### :{'blue' if mode == 'cache' else 'red'}[{name}]")
            boxes[mode] = {"figure": lane.empty(), "text": text.empty()}  # the bar is drawn in the run's own colour
        tokens = {m: [show_piece(t) for t in df[df["mode"] == m]["token"]] for m in race_draw.MODES}
        total = max(race.progress_at(df, float("inf")).of(m).total_ms for m in race_draw.MODES)

        def draw(elapsed: float) -> None:
            state = race.progress_at(df, elapsed)
            for mode, box in boxes.items():
                p = state.of(mode)
                clock = min(elapsed, p.total_ms)
                box["figure"].markdown(race_draw.progress_html(mode, p.tokens, p.total, clock, p.finished),
                                       unsafe_allow_html=True)
                name, colour = race_draw.MODES[mode]
                words = html.escape("".join(t.replace("·", " ") for t in tokens[mode][: p.tokens]))
                # html, not markdown: nothing typed is parsed as markup. Three lines, the newest at the bottom (the
                # rest scrolls in place), so the verdict under the lanes stays on the first screen at any length
                # the lane's name above its text where the columns stack (a phone, ui/style.py): both texts then
                # sit under the second lane's bar, and would otherwise say nothing of which run each is
                box["text"].html(f"<div class='dl-lane-name' data-testid='race-text-name-{mode}' style='font-size:"
                                 f"0.9rem;font-weight:600;color:{colour}'>{html.escape(name)}</div>"
                                 f"<div data-testid='race-text-{mode}' style='font-size:1.1rem;line-height:1.5;"
                                 "max-height:4.5em;overflow-y:auto;display:flex;flex-direction:column-reverse'>"
                                 f"<div style='white-space:pre-wrap'>{html.escape(result.prompt)}<b>{words}</b></div>"
                                 "</div>")

        if st.session_state.pop("race_play", False):
            t0 = now()
            while (elapsed := (now() - t0) * 1000 * speed) < total:
                draw(elapsed)
                time.sleep(0.05)
        draw(float("inf"))


    def verdict(result: race.RaceResult) -> None:
        """What the race proved and measured, said once the lanes have run: same tokens?, the speed-up, the note."""
        df, summary = result.df, result.summary
        tokens = {m: len(df[df["mode"] == m]) for m in race_draw.MODES}
        if summary.identical:
            st.success(f"**Identical tokens:** both runs chose the same {tokens['cache']} tokens. Largest logit "
                       f"difference: {logit_gap_words(summary.max_logit_diff)}.",
                       icon=":material/check_circle:")
        else:
            st.error(f"**The runs differ** from step {summary.first_divergence_step}. Largest logit difference "
                     f"before that: {summary.max_logit_diff:.2g}. "
                     + (result.precision or "In float32 they should not part: the tables below show both runs, "
                        "step by step."), icon=":material/error:")
        m = st.columns([1, 1, 1, 1, 0.6], vertical_alignment="bottom")
        sp = summary.speedup
        if sp.median_ratio:
            m[0].metric("speed-up (total decode)", f"×{sp.total_ratio:.1f}")
            m[1].metric("median decode step", f"×{sp.median_ratio:.1f}")
        steps_only = "The decode steps alone: the race's clocks above count the prefill too."
        m[2].metric("cache on: decode steps", f"{sp.cache_total_ms:.0f} ms", help=steps_only)
        m[3].metric("cache off: decode steps", f"{sp.nocache_total_ms:.0f} ms", help=steps_only)
        m[4].button("Replay", key="race_replay", on_click=lambda: st.session_state.update(race_play=True),
                    help="Play the measured race back again")
        if result.note:
            st.warning(result.note, icon=":material/speed:")


    if start:
        measure()

    result = st.session_state.get("race_result")
    if result:
        df, summary = result.df, result.summary
        if result.at:
            st.caption(f"Raced at {result.at}: the times are the point, the text is not."
                       + (f" Cache on: {result.how['cache']}; cache off: {result.how['nocache']} (compiling "
                          "apart, never in a step's time)." if result.how else ""))
        playback(result, speed)  # the two lanes first: on the first screen while they play (1280x720)
        verdict(result)  # then what they proved: it follows the playback, on the screen and in time
        st.markdown(plain(race.headline(summary.growth, busy=result.note is not None)))
        if result.rule:
            st.markdown(plain(race.cache_rule_sentence(result.rule)))
        st.caption(race_draw.prefill_caption(summary.cache_prefill_ms, summary.nocache_prefill_ms))
        chart(race_draw.latency_figure(df, scale=scale(), note=result.note), key="race_latency")
        c1, c2 = st.columns(2)
        chart(on=c1, fig=race_draw.cumulative_figure(df, scale=scale()), key="race_cumulative")
        chart(on=c2, fig=race_draw.flops_figure(df, scale=scale()), key="race_flops")
        st.download_button("Download the race as CSV (one row per step per mode)", df.to_csv(index=False),
                           file_name="race.csv", mime="text/csv", key="race_csv")
        with st.expander("Both runs, step by step"):
            st.dataframe(df, hide_index=True, width="stretch")

    st.divider()
    st.subheader("Sweep: how the gap grows with length")
    st.caption("Both modes at several lengths; each point is the median of repeated runs, its bar their fastest to "
               "slowest. The lesson: with the "
               "cache a step reads the cached keys and values and computes one position, without it every position "
               "again, so without it the time per token grows much faster with the length.")
    lengths = st.multiselect("lengths (new tokens)", [16, 32, 64, 128, 256, 512], [32, 64, 128, 256], key="race_lengths",
                             persist_state="session")
    repeats = st.number_input("repeats per length", 3, 7, 3, key="race_repeats", persist_state="session",
                              help="Each point is the median of the repeats, its bar the fastest to the slowest: "
                                   "three at least, so a median and a spread mean something")
    if st.button("Run sweep", key="race_sweep"):
        usable = [n for n in sorted(lengths) if n < room]
        bar = st.progress(0.0, text="sweeping…")
        try:
            st.session_state["race_sweep_df"] = race.sweep(lm, prompt, usable, int(repeats), settings.sampling,
                                                           on_progress=lambda f, txt: bar.progress(f, text=txt))
        except DecodeLabError as e:
            error(str(e))
        release_memory()
        bar.empty()
    sweep_df = st.session_state.get("race_sweep_df")
    if sweep_df is not None:
        c1, c2 = st.columns(2)
        chart(on=c1, fig=race_draw.sweep_figure(sweep_df, "ms_per_token", "Time per token", scale=scale()), key="race_sweep_tpt")
        chart(on=c2, fig=race_draw.sweep_figure(sweep_df, "total_ms", "Total decode time", scale=scale()), key="race_sweep_total")
        st.markdown(race_draw.sweep_caption(sweep_df))  # what this sweep measured, in its own numbers
        st.dataframe(sweep_df, hide_index=True)
