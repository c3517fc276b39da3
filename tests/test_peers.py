"""`python -m engine bench --peers`: the lean pass and CTranslate2 run the same weights, and the record says so.

CTranslate2 is the reference here, independent of this project's code: converted by its own converter from the
tensors the lean pass holds, its greedy token after the prompt must be the lean pass's. (The times are the
benchmark's to print; this test asserts none.)
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow  # two compiles of the lean pass


def test_the_peer_runs_the_lean_passs_own_weights_and_the_record_holds_every_round(tmp_path):
    from benchmarks.peers import race_peers

    race = race_peers(size="own", context=16, rounds=2, steps=2, log=lambda _: None)
    assert race.same_first_token  # the same weights: the same greedy token from both engines
    assert race.rounds == 2 and len(race.decode_ratio_rounds) == 2 and len(race.prefill_ratio_rounds) == 2
    assert all(r > 0 for r in race.decode_ratio_rounds + race.prefill_ratio_rounds)
    assert race.lean_kernel and race.peer.startswith("CTranslate2")
    assert set(race.warmup_s) == {"lean prefill", "lean decode", "peer prefill", "peer decode"}
    doc = json.loads(json.dumps(race.to_dict()))
    assert doc["decode_ratio"] == race.decode_ratio and doc["context"] == 16
    assert "lean/peer" in race.table() and f"×{race.decode_ratio:.2f}" in race.table()
