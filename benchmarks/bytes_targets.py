"""`python -m benchmarks.bytes_targets [RECORDING.json ...]`: every target of "bytes are time" beside what a recording
of `python -m engine bytes --json` measured; by default the shipped one, assets/bytes_cpu.json.

A CPU's recording (fp32 the reference) is held to the CPU's targets: bf16 weight-only decode at most ×0.6 fp32's
time (its bytes ×0.5), its 128-token prefill at least ×0.9 (not a decode-sized win), the decode step against
context a line within ±15 % of the K/V's bytes over the cache's plain read and crossing the weights within ×1.5 of
the predicted point, the step over a window of the cache at most ×0.75 the full one, int8 and int4 faster than
bf16 (or a NO: the page then says why, with the figure), and the damage over at least eight stories per model, fp32
storage agreeing exactly. A GPU's recording (the bf16 model the reference) is held to gpu-check's
(benchmarks/gpu_check.py: `bytes_targets`).

Nothing is measured here: the verdicts are read off a recording, so a run made an hour ago, on another machine,
or shipped, is judged by the same code. Exit 1 if a target does not hold.
"""

from __future__ import annotations

import argparse
import json

from benchmarks.gpu_check import bytes_targets as gpu_targets
from benchmarks.gpu_check import table
from benchmarks.records import Target
from engine.paths import ASSETS
from topics.bytes.records import Record

SHIPPED = ASSETS / "bytes_cpu.json"
MIN_STORIES = 8


def _ratio(rec: Record, storage: str, kind: str, most: float | None = None, least: float | None = None,
           target: str = "") -> Target:
    got = rec.ratio(storage, kind)
    holds = None if got is None else (got <= most if most is not None else got >= least)
    return Target(target, "not measured" if got is None else f"×{got:.2f}", holds)


def cpu_targets(rec: Record) -> list[Target]:
    """The CPU's targets (the module docstring), each beside its figure in `rec`."""
    ref = rec.reference
    out = [_ratio(rec, "bf16", "decode", most=0.6, target=f"bf16 weight-only decode ≤ ×0.6 the {ref}'s time"),
           _ratio(rec, "bf16", "prefill", least=0.9,
                  target=f"bf16 weight-only prefill ≥ ×0.9 the {ref}'s (not a decode-sized win)")]
    line = rec.line()
    out.append(Target("decode against context: the fitted slope within ±15 % of the K/V bytes over the cache's read",
                      "not measured" if line is None else f"×{line.slope_off:.2f} its prediction",
                      None if line is None else line.slope_held))
    out.append(Target("the measured crossing within ×1.5 of the predicted",
                      "not measured" if line is None else f"{line.crossing:,.0f} positions against "
                      f"{line.predicted_crossing:,.0f} (×{line.crossing_off:.2f})",
                      None if line is None else 1 / 1.5 <= line.crossing_off <= 1.5))
    evicted = rec.evicted_ratio()
    out.append(Target("the step over a window of the cache ≤ ×0.75 the full one at the longest context",
                      "not measured" if evicted is None else f"×{evicted:.2f}",
                      None if evicted is None else evicted <= 0.75))
    bf16 = rec.ratio("bf16", "decode")
    for storage in ("int8", "int4"):
        got = rec.ratio(storage, "decode")
        out.append(Target(f"{storage} weight-only decode faster than bf16's",
                          "not measured" if got is None or bf16 is None else f"×{got:.2f} against bf16's ×{bf16:.2f}",
                          None if got is None or bf16 is None else got < bf16))
    return out + damage_targets(rec)


def damage_targets(rec: Record) -> list[Target]:
    """Every storage on every model over at least MIN_STORIES stories; the reference's storage agreeing exactly."""
    if not rec.damage:
        return [Target(f"the damage over ≥ {MIN_STORIES} stories for every storage and model", "not measured", None)]
    fewest = min(len(d.agree) for d in rec.damage)
    models = sorted({d.model for d in rec.damage})
    out = [Target(f"the damage over ≥ {MIN_STORIES} stories for every storage and model",
                  f"{len(rec.damage)} (model, storage) pairs on {len(models)} models, the fewest {fewest} stories",
                  fewest >= MIN_STORIES)]
    own = [d for d in rec.damage if d.storage == rec.reference]
    exact = all(min(d.agree) == 1.0 and max(d.kl) == 0.0 for d in own)
    out.append(Target(f"{rec.reference} storage against {rec.reference}: every token agrees, KL 0",
                      f"{len(own)} models" + ("" if exact else ": some disagree"), bool(own) and exact))
    return out


def targets(rec: Record) -> list[Target]:
    """A CPU's recording against the CPU's targets, a GPU's against gpu-check's."""
    return cpu_targets(rec) if rec.reference == "fp32" else gpu_targets(rec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bytes_targets")
    ap.add_argument("recordings", nargs="*", default=[str(SHIPPED)],
                    help="`engine bytes --json` recordings (default: the shipped CPU one)")
    args = ap.parse_args(argv)
    held = True
    for path in args.recordings:
        with open(path) as f:
            rec = Record.from_dict(json.load(f))
        rows = targets(rec)
        print(f"{path}: {rec.rung} on {rec.device}, measured {rec.measured_at}")
        print(table(rows))
        print()
        held = held and all(r.holds is not False for r in rows)
    return 0 if held else 1


if __name__ == "__main__":
    raise SystemExit(main())
