"""Serving: many requests on one model, one engine step at a time.

Thin page: the engine is engine/generate/serving (ServingRun.step: arrivals -> schedule -> one paged pass ->
tokens -> a frozen record); the pictures are topics/serving/draw.py, placed by topics/serving/page_parts.py. Any recorded
step can be put back on screen (◀ ▶, the scrubber); ▶ at the newest step computes the next one.
"""

import streamlit as st

from engine.errors import StepError
from engine.generate.loop import prompt_ids
from engine.generate.serving import DEFAULTS
from engine.generate.serving.run import BATCHING, PREEMPTION
from physics import roofline
from physics.machine import release_memory
from topics.serving import draw as draw
from topics.serving import measure as measure
from topics.serving.orders import order_spread
from topics.serving.page_parts import (
    MAX_PAGE_REQUESTS,
    batching_result,
    chunking_result,
    new_serving_run,
    pictures,
    requests_editor,
    summary,
)
from topics.serving.scenarios import SCENARIOS
from ui.charts import chart
from ui.controller import Controller
from ui.links import write_link
from ui.model import device_roof
from ui.setup import class_label, page_setup
from ui.style import keys_back, picked, scale
from ui.text import error, plain, warning

POLICY_NAMES = {"newest": "newest goes", "most_blocks": "most blocks go"}  # who is preempted: short, for the bar


@st.cache_resource(max_entries=8, show_spinner="Scheduling the same requests in 200 random orders, both ways…")
def queue_orders(_lm, model: str, requests: tuple, sizing: tuple):
    """The queue's requests in random orders, each scheduled both ways (topics/serving/orders.py): a few
    seconds once per model, requests and sizing, shared by every session."""
    return order_spread(_lm, list(requests), dict(sizing))


def queue_spread(lm, requests, sizing: dict):
    """The spread of these requests over random orders, as the page shows it. Keyed by the requests and the pool, not
    by the batching knob: each order is scheduled both ways whichever way the page's run goes."""
    pool = tuple(sorted((k, v) for k, v in sizing.items() if k != "batching"))
    return queue_orders(lm, lm.spec.name, tuple(requests), pool)


def queue_comparison(lm, requests, sizing, sampling):
    """The queue served both ways, two alternated rounds after a warm-up, each way's last run recorded (drawn)."""
    return measure.batching_comparison(lm, requests, sizing, sampling, rounds=2, record=True, log=lambda *a: None)

COMPARISONS = {  # scenario: its button, the button's key, what the spinner says, the result's kind, the measurement
    "preemption": ("Compare both preemption policies", "serve_policy_compare",
                   "Serving these requests under each policy, to the end, and each request alone…", "policies",
                   measure.policy_comparison),
    "long_prompt": ("Compare chunked prefill on and off", "serve_chunk_compare",
                    "Serving these requests twice, chunked prefill on and off (after a short warm-up)…", "chunking",
                    measure.chunking_comparison),
    "queue": ("Compare continuous and static batching (measured)", "serve_batching_compare",
              "Serving the queue with continuous and with static batching, alternated, after a warm-up round…",
              "batching", queue_comparison),
}


def exactness(run) -> str:
    """The check the page's claim rests on, once per finished run: every request's tokens are the ones it gets alone."""
    kept = st.session_state.get("serve_exact")
    if not kept or kept[0] != id(run):
        st.session_state["serve_exact"] = kept = (id(run), measure.same_as_alone(run))
    same = kept[1]
    if all(same.values()):
        return f"Every request's tokens are exactly the ones it gets alone ({len(same)} of {len(same)}, checked)."
    return ("Tokens differ from the request alone for " + ", ".join(r for r, ok in same.items() if not ok)
            + ": that is a bug.")


def _n(count: int, noun: str) -> str:
    """'1 block', '14 blocks'."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


OWN = "Your own requests"  # the last choice of the scenario box: the user's own table
SIZING_KNOBS = ("page_size", "num_blocks", "max_batch_tokens", "prefix_sharing", "chunking")  # More's sizing


SIZED_BY_CODE = "serve_sized_by_code"  # counts the times code set the sizing (a pick, the switch off, a link)


def sized_by_code() -> None:
    """Code set the sizing: More's widgets are made anew, drawn with it. A closed popover's widgets never hear of a
    value set by code, and the browser would send the old values back with the next click (as the step page's
    preset and head, step/page.py). So the sizing lives in `serve_<knob>` and `serve_custom_sizing`, and each
    widget's key carries this count."""
    st.session_state[SIZED_BY_CODE] = st.session_state.get(SIZED_BY_CODE, 0) + 1


def own_sizing(made: int) -> None:
    """on_change of a sizing knob: the change is used at once (the scenario's text says "switch chunking off"), so
    the knobs as shown, not the scenario's sizing, size the next run."""
    for knob in SIZING_KNOBS:
        st.session_state[f"serve_{knob}"] = st.session_state[f"serve_{knob}.{made}"]
    st.session_state["serve_custom_sizing"] = True


def scenario_sizing() -> None:
    """The scenario's own sizing again, its knobs drawn anew with it."""
    st.session_state["serve_custom_sizing"] = False
    sized_by_code()


def scenario_picked() -> None:
    """on_change of the scenario box: a scenario brings its own sizing, its story told on it (another's pool may
    not hold its prompt). Your own requests keep the knobs."""
    picked()
    if st.session_state.get("serve_scenario") != OWN:
        scenario_sizing()


def switched(key: str, made: int) -> None:
    """on_change of "use these settings instead of the scenario's": on, the knobs as shown; off, the scenario's."""
    if st.session_state[key]:
        own_sizing(made)
    else:
        scenario_sizing()


def show() -> None:
    """The Serving page, drawn (pages/serving.py is its door)."""
    settings, lm = page_setup("serving", need_model=True)
    wanted = st.session_state.pop("serve_wanted", None)  # a link's scenario and engine steps, checked here
    if wanted is not None:
        name, steps, at, preemption, batching = wanted
        if name not in SCENARIOS:
            warning(f"link parameter scenario={name[:40]!r} ignored: no such serving scenario")
        else:
            st.session_state["serve_scenario"] = SCENARIOS[name]["title"]
            scenario_sizing()  # a link carries a scenario, sized as it is
            for knob, value, scenario, allowed in (("preemption", preemption, "preemption", PREEMPTION),
                                                   ("batching", batching, "queue", BATCHING)):
                if value is None:
                    continue
                if value in allowed and name == scenario:
                    st.session_state[f"serve_{knob}"] = value
                else:
                    warning(f"link parameter {knob}={value[:40]!r} ignored: the {SCENARIOS[scenario]['title']!r} "
                            f"scenario takes {' or '.join(allowed)}")
            if steps is not None:
                st.session_state["serve_replay"] = (steps, at)
    CHOICES = [sc["title"] for sc in SCENARIOS.values()] + [OWN]
    BY_TITLE = {sc["title"]: name for name, sc in SCENARIOS.items()}


    def chosen() -> tuple[list | None, dict]:
        """The requests and the sizing on screen: a scenario's, or the user's own table with the sizing knobs."""
        title = st.session_state.get("serve_scenario", CHOICES[0])
        name = BY_TITLE.get(title)
        sizing = dict(SCENARIOS[name]["sizing"]) if name else {**DEFAULTS, "prefix_sharing": True, "chunking": True}
        for knob in SIZING_KNOBS:
            if f"serve_{knob}" in st.session_state and st.session_state.get("serve_custom_sizing"):
                sizing[knob] = st.session_state[f"serve_{knob}"]
        if name == "preemption" and st.session_state.get("serve_preemption") in PREEMPTION:  # the policy knob
            sizing["preemption"] = st.session_state["serve_preemption"]
        if name == "queue" and st.session_state.get("serve_batching") in BATCHING:  # how a freed slot is refilled
            sizing["batching"] = st.session_state["serve_batching"]
        requests = SCENARIOS[name]["requests"] if name else st.session_state.get("serve_own_requests")
        return requests, sizing


    def new_run():
        requests, sizing = chosen()
        if requests is None:
            raise StepError("Add at least one request to the table above first.")
        return new_serving_run(lm, requests, sizing, settings.sampling)


    steps = Controller("serve", new_run, noun="engine step")
    requests, sizing = chosen()
    name = BY_TITLE.get(st.session_state.get("serve_scenario", CHOICES[0]))
    steps.sync((settings, name, tuple(requests or ()), tuple(sorted(sizing.items()))))
    steps.replay_queued()  # a link's engine steps, now that its scenario is on screen
    if not steps.started:
        st.session_state.pop("serve_measured", None)
    bar = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
    bar.selectbox("scenario", CHOICES, key="serve_scenario", persist_state="session", label_visibility="collapsed",
                  width=330, on_change=scenario_picked)  # narrow enough that the preemption knob and More share its row
    keys_back()  # after a pick, E and → are shortcuts again, not letters typed into the box
    if name == "preemption":  # which running request goes when the pool runs out: switch it and compare
        st.session_state.setdefault("serve_preemption", sizing.get("preemption", PREEMPTION[0]))
        bar.segmented_control("preemption policy", PREEMPTION, key="serve_preemption", format_func=POLICY_NAMES.get,
                              persist_state="session", label_visibility="collapsed",
                              help="Who is preempted when a running request needs a block and none is free: the "
                                   "newest admitted (vLLM's policy), or the one holding the most blocks. A change "
                                   "starts a new run.")
    if name == "queue":  # how a freed batch slot is refilled: switch it and watch the slots
        st.session_state.setdefault("serve_batching", sizing.get("batching", BATCHING[0]))
        bar.segmented_control("batching", BATCHING, key="serve_batching",
                              persist_state="session", label_visibility="collapsed",
                              help="Continuous: a finished request's slot goes to the front of the queue the next "
                                   "pass. Static: a batch starts when the one before has finished, so its slots wait "
                                   "for its longest member. A change starts a new run.")
    steps.buttons(bar, first=None, next_label=None, forward_label="▶ step")
    for knob in SIZING_KNOBS:  # the knobs show the sizing in use: the scenario's, until one is changed
        if not st.session_state.get("serve_custom_sizing") or f"serve_{knob}" not in st.session_state:
            st.session_state[f"serve_{knob}"] = sizing[knob]
    made, custom = st.session_state.get(SIZED_BY_CODE, 0), bool(st.session_state.get("serve_custom_sizing"))
    with bar.popover("More", icon=":material/tune:"):
        steps.autoplay(st)
        st.markdown("**Sizing** (changes start a new run)")
        switch = f"serve_custom_sizing.{made}.{int(custom)}"  # made anew when a knob turns it on
        st.toggle("use these settings instead of the scenario's", value=custom, key=switch,
                  on_change=switched, args=(switch, made),
                  help="On by itself as soon as you change one; off: the scenario's own sizing again")
        c1, c2, c3 = st.columns(3)
        for where, knob, label, most in ((c1, "page_size", "page size", 256), (c2, "num_blocks", "blocks", 4096),
                                         (c3, "max_batch_tokens", "tokens per pass", 4096),
                                         (st, "prefix_sharing", "prefix sharing", None),
                                         (st, "chunking", "chunked prefill", None)):
            shown = dict(value=st.session_state[f"serve_{knob}"], key=f"serve_{knob}.{made}", on_change=own_sizing,
                         args=(made,))
            where.number_input(label, 1, most, **shown) if most else where.toggle(label, **shown)
    steps.run_to_end_if_asked()
    by_hand = bool(st.session_state.get("serve_custom_sizing"))  # a link carries a scenario, not its knobs
    write_link(settings, scenario=name, steps=steps.latest if steps.started and name and not by_hand else None,
               at=steps.at if steps.started and name and not by_hand and steps.at != steps.latest else None,
               preemption=sizing.get("preemption") if name == "preemption" else None,
               batching=sizing.get("batching") if name == "queue" else None)

    st.caption(f"**Serving many requests** · {_n(sizing['num_blocks'], 'block')} of "
               f"{_n(sizing['page_size'], 'position')} · {_n(sizing['max_batch_tokens'], 'token')} a pass · "
               "prefix sharing "
               f"{'on' if sizing['prefix_sharing'] else 'off'} · chunked prefill {'on' if sizing['chunking'] else 'off'} · "
               + (f"preemption: {POLICY_NAMES.get(sizing['preemption'], sizing['preemption'])} · "
                  if "preemption" in sizing else "")
               + (f"{sizing['max_seqs']} slots, {sizing.get('batching', 'continuous')} batching · "
                  if sizing.get("max_seqs") else "") + "timings measured")
    if said := steps.said():
        error(said)
    if notice := steps.notice():
        st.info(notice, icon=":material/replay:")

    if name is None:
        with st.expander("Your requests (prompt, max new tokens, the engine step it arrives at)", expanded=not steps.started):
            own = requests_editor("serve_own_editor", st.session_state.get("serve_own_requests")
                                  or SCENARIOS["arrivals"]["requests"][:3])
            if own is not None and own != st.session_state.get("serve_own_requests"):
                st.session_state["serve_own_requests"] = own
                st.rerun()  # the run belongs to the requests: the controller starts afresh with the new ones
            st.caption(f"Up to {MAX_PAGE_REQUESTS} requests; arrivals in order.")

    if not steps.started:
        if name:
            st.info(SCENARIOS[name]["why"] + " Press **▶ step** (→) to run engine step 0: one forward pass.")
            st.subheader("The requests, before the server starts")
            st.dataframe(draw.arrivals_frame(requests, lambda p: len(prompt_ids(lm, p))), hide_index=True,
                         width="stretch", height="content", column_config={"prompt": st.column_config.TextColumn(width="large")})
            st.caption(f"The KV pool: {_n(sizing['num_blocks'], 'block')} of {_n(sizing['page_size'], 'position')}, "
                       "all free. Each request takes blocks as its prompt is prefilled and its tokens are chosen.")
        else:
            st.info("Edit the requests above, then press **▶ step** (→).")
        st.stop()

    run, at = steps.run, steps.at
    class_label(f"engine step {at}", order=(steps.run_id, at))  # leading a class: what students see this screen called (classroom/page_copy.py)
    row = st.container(horizontal=True, vertical_alignment="center", gap="medium")
    if steps.latest > 0:
        row.slider("engine step", 0, steps.latest, key="serve_at",
                   persist_state="session", label_visibility="collapsed", width=300)
    row.markdown(summary(run, at))  # the engine's numbers only: nothing typed by a user
    if run.done and at < steps.latest:  # a link's at=, or the scrubber: an earlier step of a finished run
        st.markdown(f"Showing engine step {at}: the run went on to step {steps.latest}, where {steps.stopped()} "
                    "(▶ or the scrubber to go there).")
    elif run.done:
        st.markdown(f"**Finished**: {steps.stopped()}. Reset (X) to serve them again. {exactness(run)}")
        if any(s.preempted for s in run.records):  # exactness, checked once per run, not only said in prose
            kept = st.session_state.get("serve_roomy")
            if kept is None or kept[0] != id(run):
                with st.spinner("Serving the same requests in a pool big enough for all of them, to compare…"):
                    kept = (id(run), measure.roomy_check(run, requests, sizing, settings.sampling))
                st.session_state["serve_roomy"] = kept
            st.markdown(draw.roomy_sentence(kept[1]))
    pictures(run, at)
    steps.autoplay_tick()

    st.subheader("Each request: time to first token, time per output token")
    shown = draw.latency_frame(run).astype({c: str for c in draw.NOT_YET})  # one type a column: Arrow takes it as is
    st.dataframe(shown, hide_index=True, width="stretch", height="content",  # every request's row whole ("auto"
                 # cuts the twelfth), "–" where a number is not there yet,
                 column_config={c: st.column_config.Column(alignment="right") for c in draw.NOT_YET})  # numbers' side
    st.caption("TTFT counts engine steps from the one the request arrives at to the one that chose its first token, and "
               "the measured time of those steps, each whole (its pass, the picture's 'pass … ms', plus scheduling and "
               "choosing tokens); TPOT is the mean measured gap between its consecutive tokens (the wait for the first "
               "is TTFT's). Arrivals are in engine steps.")
    if name:
        st.caption(SCENARIOS[name]["why"])
    if name == "queue":  # one order of the requests is shipped: how the ratio spreads over every order
        st.subheader("The same requests in every order")
        orders = queue_spread(lm, requests, sizing)
        chart(draw.order_figure(orders, scale=scale()), "serve_orders_chart")
        st.markdown(draw.order_sentence(orders))

    st.subheader("KV memory: the blocks this run took, and two other ways to hold the same requests")
    memory = measure.memory(run, upto=at)  # the steps up to the one on screen, like the status line above
    st.table(draw.memory_frame(memory).set_index("allocator"))
    st.caption(f"KV memory of this run up to step {at}: the most each allocator held at any one step (peak), and the "
               f"share of what it held that held no token's keys and values, averaged over the steps (wasted). Paged "
               f"blocks are what this run really took (whole blocks; a shared block is held and stored once); the "
               f"others are what the same requests would hold if each reserved the model's whole context "
               f"({memory.max_length} positions), or waited in one padded batch for the longest.")
    if sizing["prefix_sharing"]:
        st.markdown(draw.sharing_sentence(memory))
    st.subheader("Measured on this machine, side by side")
    # each measurement kept beside the others, by kind, until the run starts anew
    measured = st.session_state.setdefault("serve_measured", {})
    if name in COMPARISONS:  # the scenario's own question, answered by serving its requests again
        label, key, doing, kind, compare = COMPARISONS[name]
        if st.button(label, key=key):
            with st.spinner(doing):
                measured[kind] = compare(lm, requests, sizing, settings.sampling)
            release_memory()
    c = st.container(horizontal=True, vertical_alignment="bottom")
    rounds = c.number_input("rounds", 1, 5, 1, key="serve_tp_rounds", persist_state="session", width=100,
                            help="Rounds of every way, alternated, after a warm-up: medians of more rounds move less")
    if c.button("Throughput, four ways", key="serve_tp",  # a label short enough for a phone's button
                help="The same prompts served by continuous batching, a static batch, one request at a time, and "
                     "transformers' generate_batch; tokens a second, side by side"):
        with st.spinner(f"Serving the same prompts four ways, one length for all and then mixed lengths ({rounds} "
                        f"round{'s' if rounds != 1 else ''} each, after a warm-up)…"):
            prompts = [r.prompt for r in (requests or [])][:8] or measure.PROMPTS
            mixed = measure.MIXED[: len(prompts)]
            both = measure.throughput_side_by_side(lm, prompts, {"same": sum(mixed) // len(mixed), "mixed": mixed},
                                                   rounds=int(rounds), log=lambda *a: None)  # alternated
            measured["throughput"] = (both["same"], both["mixed"])
        release_memory()
    if c.button("Decode pass time against batch size", key="serve_batch"):
        with st.spinner("Timing decode passes shared by 1 to 16 sequences…"):
            measured["batch"] = measure.step_time_vs_batch(lm, sizes=(1, 2, 4, 8, 16))
        release_memory()
    if "policies" in measured:
        st.table(draw.policy_frame(measured["policies"]).set_index("policy"))
        st.caption(draw.policy_sentence(measured["policies"]))
    if "chunking" in measured:
        chunking_result(measured["chunking"])
    if "batching" in measured:
        batching_result(measured["batching"])
    if "throughput" in measured:
        same, mixed = measured["throughput"]
        chart(draw.throughput_figure(same, mixed, scale=scale()), "serve_tp_chart")
        st.markdown(draw.throughput_sentence(same, mixed))
        n = same.rounds
        st.caption(f"{same.requests} prompts, {sum(mixed.lengths)} new tokens in all either way; the same tokens "
                   f"every way (greedy). {'One round' if n == 1 else f'Medians of {n} rounds'} of every way of both "
                   "workloads, alternated, after a warm-up round: a busy server moves single rounds (more rounds in the box "
                   "beside the button, or `python -m engine bench`).")
    if "batch" in measured:
        result = measured["batch"]
        br = measure.batch_roofline(result, lm, device_roof(), roofline.h100())  # this device's roof, a GPU's beside
        left, right = st.columns(2, gap="small")
        chart(draw.batch_time_figure(result.rows, scale=scale()), "serve_batch_chart", on=left)
        chart(draw.batch_roofline_figure(br, scale=scale()), "serve_batch_roofline", on=right)
        st.caption(draw.batch_time_caption(result))
        if result.note:  # a measurement whose order contradicts physics, said where the class reads the chart
            st.warning(result.note, icon=":material/speed:")
        st.markdown(plain(draw.batch_roofline_sentence(br)))
        st.expander(draw.batch_roofline_gpu_title(br)).markdown(plain(draw.batch_roofline_gpu_words(br)))
