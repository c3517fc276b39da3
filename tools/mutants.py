"""Plant the bugs the fast tier must catch, one at a time, and say which test caught each. Run it before you stop.

    python -m tools.mutants              every mutant (about three minutes on a quiet 2-core machine)
    python -m tools.mutants NAME ...     only these
    python -m tools.mutants --list       what each one plants, and the tests meant to kill it

Each bug is planted at run time inside a pytest subprocess: this module is loaded there as a plugin
(`-p tools.mutants`) and, with DECODE_LAB_MUTANT naming the bug, patches the engine before any test runs. Nothing
is written to disk. A mutant is killed when one of its tests (fast tier only) fails; if all pass it survived, and
this exits 1. The same tests run once first with nothing planted: they must pass, or a kill would mean nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

ENV = "DECODE_LAB_MUTANT"
FAST = "not browser and not system and not slow"
REFERENCE_TESTS = [  # the engine's tokens and logits against transformers' own copy of the model
    "tests/test_bundled.py::test_bundled_models_give_transformers_own_tokens_and_logits",
    "tests/test_families.py::test_greedy_tokens_and_logits_with_and_without_cache_equal_transformers",
    "tests/test_serving.py::test_tiny_families_serve_transformers_own_tokens_and_logits",
    "tests/test_speculative.py::test_greedy_speculation_gives_the_targets_own_greedy_tokens_and_logits",
]
SPECULATIVE_SAMPLING_TESTS = [
    "tests/test_speculative.py::test_speculative_sampling_draws_the_targets_distribution_by_frequency",
    "tests/test_speculative.py::test_a_round_of_the_engines_judge_yields_the_expected_tokens_per_pass",
]
SAMPLING_TESTS = ["tests/test_sampling.py"]


# ---------------------------------------------------------------- the bugs, planted in this process


def _replace(original, patched) -> None:
    """Put `patched` wherever an engine module holds `original` (its own module, and every `from x import name`)."""
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("engine"):
            for attr, value in list(vars(module).items()):
                if value is original:
                    setattr(module, attr, patched)


def attention_temperature() -> None:
    """Bug A: the capture path's attention 1% too hot (queries x 1.01): logits off by ~1e-2, greedy tokens kept."""
    from engine.forward import capture

    own = capture._eager
    capture._eager = lambda module: lambda m, q, *args, **kw: own(module)(m, q * 1.01, *args, **kw)


def cache_rolled_back_one_too_far() -> None:
    """A KV-cache off-by-one: undoing a pass (a timing repeat, a rejected proposal) forgets one position more."""
    from engine.forward.cache import roll_back

    _replace(roll_back, lambda cache, positions: roll_back(cache, positions + 1 if positions > 0 else positions))


def inverted_keep() -> None:
    """Bug B: a speculative proposal kept with chance 1 - min(1, p/q) when that chance is fractional."""
    from engine.forward.sampling import Chooser

    coin = Chooser.coin
    Chooser.coin = lambda self, chance: coin(self, 1.0 - chance if 0.0 < chance < 1.0 else chance)


def residual_is_p() -> None:
    """After a rejection, the token is drawn from p itself instead of max(0, p - q), normalised."""
    from engine.generate.speculative import residual

    _replace(residual, lambda p, q: p)


def _without(kind: str):
    """Sampling's processors, less the transformers warper named `kind`."""
    from transformers import LogitsProcessorList

    from engine.forward.sampling import Sampling

    build = Sampling.processors
    Sampling.processors = lambda self: LogitsProcessorList(p for p in build(self) if type(p).__name__ != kind)


def temperature_ignored() -> None:
    """Sampling draws from softmax(logits), whatever the temperature."""
    _without("TemperatureLogitsWarper")


def top_k_ignored() -> None:
    """Sampling draws from every token, whatever top-k says."""
    _without("TopKLogitsWarper")


def remote_code_trusted() -> None:
    """A model's config is read with trust_remote_code on: the code in its folder runs."""
    from transformers import AutoConfig

    read = AutoConfig.from_pretrained.__func__
    AutoConfig.from_pretrained = classmethod(lambda cls, *a, **kw: read(cls, *a, **{**kw, "trust_remote_code": True}))


def probe_counts_half_the_flops() -> None:
    """The device probe counts a matmul's n³ multiply-adds as n³ FLOPs, not 2·n³: the roofline's peak halves."""
    from engine.measure import roofline

    rate = roofline._best_rate
    roofline._best_rate = lambda fn, work, device, budget_s: rate(fn, work / 2 if work == 2 * 1024**3 else work,
                                                                   device, budget_s)


def overhead_rule_at_8x() -> None:
    """A step up to 8x its larger bound is still labelled bound by it (the rule says 3x)."""
    from engine.measure import roofline

    roofline.OVERHEAD = 8.0


def race_headline_untold() -> None:
    """The race's headline says "cannot be told apart" when the cached run's growth was measurably steeper."""
    from topics.race import measure

    said = measure.headline
    measure.headline = lambda s: re.sub(r"Here the cached run's time grew measurably faster.*Run again\.",
                                        "At this length the two growth rates cannot be told apart: run longer.",
                                        said(s))


def link_forgets_seed() -> None:
    """A copied link no longer carries the seed: a sampled run opened from it draws other tokens."""
    from ui import links

    links.LINK_KEYS.pop("seed")


def double_click_steps_twice() -> None:
    """Next token takes a step for a click made before the last step reached the screen (a double click: two)."""
    from ui.controller import Controller

    Controller._too_soon = lambda self: False


# ---- class


def class_picture_at_layer_zero() -> None:
    """A follower's stage is built for layer 0, whatever layer the lecturer picked (the phone's layout too)."""
    import classroom.hub as hub

    real = hub.stage_part
    hub.stage_part = lambda shared, at, layer, head, phone=False: real(shared, at, 0, head, phone)


def class_told_head_zero() -> None:
    """The class is told head 0 (its pictures drawn for it), whatever head the lecturer's stage draws."""
    from classroom.publisher import Publisher

    update = Publisher.update
    Publisher.update = lambda self, s, at, view, layer, head, fork, hold=None: update(self, s, at, view, layer, 0,
                                                                                      fork, hold)


def link_drops_zeros() -> None:
    """A link leaves out every zero (seed 0, top-k 0, temperature 0, step 0, layer 0, an empty stop list): opened,
    the defaults come back instead of the values on screen."""
    from engine import links as engine_links
    from ui import links as ui_links

    make = engine_links.make_link

    def dropping(settings: dict) -> dict:
        return make({k: v for k, v in settings.items() if v not in (0, "")})

    engine_links.make_link = ui_links.make_link = dropping


def fork_without_a_way_back() -> None:
    """A forked page has no link back to the class: the student can return only by typing the code again."""
    import classroom.page

    classroom.page.back_to_class = lambda follow_page: None


CLASS_PICTURE_TESTS = [
    "tests/test_class.py::test_a_followers_pictures_are_the_lecturers_own_at_the_layer_and_head_the_lecturer_picked",
    "tests/test_class.py::test_a_stream_starts_with_the_whole_state_then_gets_each_version_pushed",
    "tests/test_class.py::test_a_picture_asked_for_by_many_followers_at_once_is_built_once",
]


MUTANTS = {  # name -> (plant it, the fast-tier tests meant to kill it)
    "attention-temperature": (attention_temperature, REFERENCE_TESTS),
    "cache-off-by-one": (cache_rolled_back_one_too_far, REFERENCE_TESTS),
    "inverted-keep": (inverted_keep, SPECULATIVE_SAMPLING_TESTS),
    "residual-is-p": (residual_is_p, SPECULATIVE_SAMPLING_TESTS),
    "temperature-ignored": (temperature_ignored, SAMPLING_TESTS),
    "top-k-ignored": (top_k_ignored, SAMPLING_TESTS),
    "remote-code-trusted": (remote_code_trusted, ["tests/test_loading.py::test_remote_code_is_refused_and_never_runs"]),
    "probe-half-flops": (probe_counts_half_the_flops,
                         ["tests/test_scale.py::test_device_probe_counts_the_work_it_times"]),
    "overhead-rule-8x": (overhead_rule_at_8x, [
        "tests/test_fidelity.py::test_no_step_is_labelled_memory_bound_when_its_time_is_more_than_3x_its_memory_bound"]),
    "race-headline-untold": (race_headline_untold,
                             ["tests/test_race.py::test_the_headline_never_claims_more_than_the_fit"]),
    "link-forgets-seed": (link_forgets_seed,
                          ["tests/test_app.py::test_a_sampled_runs_link_reproduces_its_text_and_stage"]),
    "double-click-two-steps": (double_click_steps_twice, [
        "tests/test_odd_input.py::test_a_click_made_before_the_last_step_reached_the_screen_takes_no_step"]),
    # class
    "class-picture-layer-0": (class_picture_at_layer_zero, CLASS_PICTURE_TESTS),
    "class-told-head-0": (class_told_head_zero, CLASS_PICTURE_TESTS[:2]),
    "link-drops-zeros": (link_drops_zeros, ["tests/test_links.py"]),
    "fork-without-way-back": (fork_without_a_way_back, [
        "tests/test_class.py::test_a_forked_page_links_back_to_the_lecturers_live_step_until_the_class_ends"]),
}


def pytest_configure(config) -> None:
    """As a pytest plugin: plant the mutant DECODE_LAB_MUTANT names (none: the control run)."""
    name = os.environ.get(ENV)
    if name:
        MUTANTS[name][0]()


# ---------------------------------------------------------------- the runner


def run_tests(tests: list[str], mutant: str | None) -> tuple[int, list[str], str]:
    """pytest in a subprocess, one process, fast tier only, a mutant's run stopping at its first failure:
    (exit code, the failed test ids, the output). The cache is off, so `--lf` never replays a mutant's failures."""
    env = {k: v for k, v in os.environ.items() if k != ENV} | ({ENV: mutant} if mutant else {})
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "tools.mutants", "-p", "no:cacheprovider",
           "-m", FAST, "-rf", *(["-x"] if mutant else []), *tests]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    out = done.stdout + done.stderr
    return done.returncode, re.findall(r"^FAILED (.+?)(?: - .*)?$", out, flags=re.MULTILINE), out


def main(argv: list[str]) -> int:
    if argv == ["--list"]:
        for name, (plant, tests) in MUTANTS.items():
            print(f"{name}: {plant.__doc__}\n    " + "\n    ".join(tests))
        return 0
    names = argv or list(MUTANTS)
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        print(f"unknown mutant(s) {unknown}; known: {', '.join(MUTANTS)}", file=sys.stderr)
        return 2
    every_test = list(dict.fromkeys(t for n in names for t in MUTANTS[n][1]))
    t0 = time.perf_counter()
    code, failed, out = run_tests(every_test, None)
    if code != 0:
        print(out[-3000:] + f"\nwith no bug planted the tests do not pass (exit {code}): fix them first.")
        return 2
    print(f"{'(nothing planted)':24} all pass  ({time.perf_counter() - t0:.0f} s)")
    survivors = []
    for name in names:
        t0 = time.perf_counter()
        code, failed, out = run_tests(MUTANTS[name][1], name)
        took = f"({time.perf_counter() - t0:.0f} s)"
        if code == 1 and failed:
            print(f"{name:24} killed by {failed[0]}  {took}")
        else:
            survivors.append(name)
            why = "SURVIVED: every test passed" if code == 0 else f"did not run (pytest exit {code}):\n{out[-2000:]}"
            print(f"{name:24} {why}  {took}")
    print(f"{len(names) - len(survivors)} of {len(names)} mutants killed" +
          (f"; survived: {', '.join(survivors)}" if survivors else ""))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
