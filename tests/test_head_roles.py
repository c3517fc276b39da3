"""Heads are named for what their measured weights do: previous token, first token, after a copy, current, broad.

A label says which rows it was read from (the newest query alone, or N rows averaged), and the row drawn beside it
peaks where it says: checked on the step page's own chart, against the drawn weights and the run's token ids."""

from __future__ import annotations

import base64
import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from drawing.head_roles import ORDER, earlier_copies, head_roles, roles_sentence
from tests.test_app import SCENARIOS, click, fresh_app, open_view

# positions:   0    1     2     3     4    5     6     7
IDS = [9, 11, 12, 13, 11, 14, 15, 11]  # token 11 at 1, 4 and 7: after its earlier copies came 12 (pos 2), 14 (pos 5)


def step(weights: list, kv_len: int = 8, key_start: int = 0):
    """A recorded step whose one layer kept these rows for each head: [head, key_pos] (the newest query) or
    [head, query_pos, key_pos] (the last query rows)."""
    pattern = torch.tensor(weights, dtype=torch.float16)
    if pattern.dim() == 2:
        pattern = pattern[:, None, :]
    return SimpleNamespace(kv_len=kv_len, layers=[SimpleNamespace(pattern=pattern, key_start=key_start)])


def one_hot(pos: int, width: int = 8, weight: float = 0.9) -> list[float]:
    row = [(1 - weight) / (width - 1)] * width
    row[pos] = weight
    return row


def test_earlier_copies_are_found_by_token_id():
    assert earlier_copies(IDS, 7) == [1, 4]
    assert earlier_copies(IDS, 3) == []


def test_each_kind_of_head_is_named_for_where_its_weight_goes():
    copy_row = [0.02] * 8
    copy_row[2], copy_row[5] = 0.3, 0.4  # the tokens after the earlier copies of token 11
    t = step([one_hot(6), one_hot(0), copy_row, one_hot(7), [1 / 8] * 8, one_hot(3, weight=0.35)])
    roles = {r.head: r.role for r in head_roles(t, 0, IDS)}
    assert roles == {0: "previous token", 1: "first token", 2: "after a copy", 3: "current token", 4: "broad",
                     5: "looks at"}


def test_a_role_read_from_many_rows_is_averaged_and_a_head_with_none_is_mixed():
    rows = 4  # query positions 4..7 of a prefill
    prev = [[one_hot(q - 1)[k] if k <= q else 0.0 for k in range(8)] for q in range(4, 8)]
    scattered = [one_hot(p, weight=0.35) for p in (3, 0, 5, 2)]
    t = step([prev, scattered])
    roles = head_roles(t, 0, IDS, every_row=True)
    assert [r.role for r in roles] == ["previous token", "mixed"] and [r.rows for r in roles] == [rows, rows]
    assert roles_sentence(roles, [str(i) for i in IDS], 0, rows).startswith(f"Layer 0, averaged over its {rows}")


def test_a_role_read_from_one_row_holds_only_where_its_keys_hold_the_rows_peak():
    """0.42 on the previous token is enough weight, but a row whose largest weight (0.45) sits on key 3 is drawn
    darkest there: it is not named for the previous token; 0.03 ahead of it, it is split. With 0.50 on key 3, named
    for key 3."""
    row = [0.02, 0.02, 0.02, 0.45, 0.03, 0.02, 0.42, 0.02]
    (role,) = head_roles(step([row]), 0, IDS)
    assert (role.role, role.key_pos, role.rows, role.query_pos) == ("split", 3, 1, 7)
    row = [0.02, 0.02, 0.02, 0.50, 0.03, 0.02, 0.37, 0.02]
    (role,) = head_roles(step([row]), 0, IDS)
    assert (role.role, role.key_pos, role.rows, role.query_pos) == ("looks at", 3, 1, 7)


def test_a_row_whose_two_largest_weights_nearly_tie_names_no_one_key():
    """'head 3 · looks at ·upon (0.36)' beside a row giving 0.35 to its own token: a near-tie named as a choice. A row
    whose largest weight leads the next by less than 0.05 is 'split'; one that leads by more still names its key."""
    tie = [0.02, 0.02, 0.02, 0.36, 0.03, 0.02, 0.18, 0.35]
    (role,) = head_roles(step([tie]), 0, IDS)
    assert (role.role, role.key_pos) == ("split", 3)
    lead = [0.02, 0.02, 0.02, 0.38, 0.03, 0.02, 0.20, 0.31]
    (role,) = head_roles(step([lead]), 0, IDS)
    assert (role.role, role.key_pos) == ("looks at", 3)


def test_the_first_row_of_a_prefill_is_never_counted_for_a_role():
    """Query 0 can only look at itself (weight 1, no choice made): averaging it in would call heads 'current token'."""
    rows = [[1.0] + [0.0] * 7] + [one_hot(q - 1, weight=0.5)[: q + 1] + [0.0] * (7 - q) for q in range(1, 8)]
    (role,) = head_roles(step([rows]), 0, IDS, every_row=True)
    assert role.role != "current token" and role.rows <= 7


def test_the_sentence_names_every_head_once_grouped_by_role():
    t = step([one_hot(6), one_hot(6), one_hot(0), [1 / 8] * 8])
    text = roles_sentence(head_roles(t, 0, IDS), [f"p{i}" for i in range(8)], 0)
    assert "previous token: heads 0, 1" in text and "first token: head 2" in text and "broad: head 3" in text
    assert text.index("previous token") < text.index("first token") < text.index("broad")


@pytest.mark.parametrize("steps", [0, 3])
@pytest.mark.parametrize("every_row", [False, True])
def test_every_head_of_the_bundled_model_gets_a_role_from_its_pattern(bundled_lm, steps, every_row):
    from engine import Stepper

    run = Stepper(bundled_lm, "Tom had a red ball. Tom liked to play with the ball. One day, Tom",
                  max_new_tokens=8, stop_on_eos=False)
    run.run(steps + 1)
    t = run.records[-1]
    for layer in range(bundled_lm.spec.layers):
        roles = head_roles(t, layer, run.ids[0].tolist(), every_row=every_row)
        assert [r.head for r in roles] == list(range(bundled_lm.spec.heads))
        assert all(r.role in ORDER or r.role == "looks at" for r in roles)
        assert all(0.0 <= r.weight <= 1.0 + 1e-3 for r in roles)


def test_the_attention_picture_names_each_head_by_its_role_beside_its_number(bundled_lm):
    """The roles are on the heatmap's head axis, so a projector shows them with the picture (the sentence under it
    fell below the first screen at 1280x720)."""
    from drawing.views import StepContext, view_blocks
    from engine import Stepper

    run = Stepper(bundled_lm, "Tom had a red ball. Tom liked to play with the ball. One day, Tom",
                  max_new_tokens=4, stop_on_eos=False)
    run.run(2)
    t = run.records[-1]
    c = StepContext(records=tuple(run.records), ids=tuple(run.ids[0].tolist()), pieces=tuple(run.pieces()),
                    prompt_len=run.prompt_len, prompt=run.prompt, spec=bundled_lm.spec, layer=1)
    heat = next(b.value for b in view_blocks("Attention", c) if b.kind == "figure")
    names = list(heat.data[0].y)
    roles = head_roles(t, 1, run.ids[0].tolist())
    assert len(names) == bundled_lm.spec.heads
    for name, r in zip(names, roles):
        assert name.startswith(f"head {r.head} · ") and (r.role in name or r.role == "looks at" and "looks at" in name)


# ---------------------------------------------------------------- the step page: each label against the row drawn


def chart(at) -> tuple[list[str], list[str], np.ndarray, str]:
    """The Attention view's heatmap as the page holds it: (head labels, key labels, weights [head, key_pos], the
    words under it: its caption)."""
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    trace = spec["data"][1]
    z = trace["z"]
    weights = np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(
        [int(n) for n in str(z["shape"]).split(",")]) if isinstance(z, dict) else np.array(z, dtype=float)
    under = " ".join(c.value for c in at.caption)
    return list(trace["y"]), list(trace["x"]), weights, under


def shown(at, start: str) -> str:
    """The first markdown line on the page that holds `start`, as a reader sees it (the page escapes markdown)."""
    return re.sub(r"\\(.)", r"\1", next(m.value for m in at.markdown if start in m.value))


def agrees(label: str, row: np.ndarray, q: int, ids: list[int], keys: list[str]) -> bool:
    """Written out here, apart from the engine: does a one-row label say where this drawn row peaks?"""
    role = label.split(" · ", 1)[1]
    peak = int(np.nanargmax(row))
    after = [p + 1 for p in range(q) if ids[p] == ids[q] and p + 1 < q - 1]
    if role.startswith("looks at "):
        return keys[peak].split(" ", 1)[1].startswith(role.removeprefix("looks at ")[:10])
    return {"previous token": peak == q - 1 and row[q - 1] >= 0.4,
            "first token": peak == 0 and row[0] >= 0.4,
            "current token": peak == q and row[q] >= 0.4,
            "after a copy": peak in after and np.nansum(row[after]) >= 0.3,
            "broad": np.nanmax(row) < 0.25,
            "split": np.nanmax(row) - np.sort(row[~np.isnan(row)])[-2] < 0.05}[role]


def test_at_a_prefill_each_heads_label_says_where_the_row_drawn_beside_it_peaks():
    """Issue 42: 'head 0 · previous token' (a role averaged over the prefill's rows) was drawn beside the newest
    query's row, which peaks two tokens back. The picture draws one row per head, so each label is read from that
    row, and says so; with every row drawn, each role says how many rows it is averaged over."""
    at = open_view(click(fresh_app(), "step_btn_prefill"), "Attention")
    run = at.session_state["step_run"]
    ids, q = run.ids[0].tolist(), run.records[0].kv_len - 1
    assert q >= 3  # a prompt long enough for every role
    for layer in range(run.lm.spec.layers):
        at.segmented_control(key="step_layer").set_value(layer).run()
        labels, keys, z, under = chart(at)
        for h, label in enumerate(labels):
            assert label.startswith(f"head {h} · ") and agrees(label, z[h], q, ids, keys), (layer, label, z[h])
        assert "role is read from that row alone" in under  # the labels say which row they were read from
        said = shown(at, f"Layer {layer}, ")
        assert said.startswith(f"Layer {layer}, for the newest query")
    at.toggle(key="step_att_every").set_value(True).run()  # every query row, one panel per head
    panels = [a["text"] for a in json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["annotations"]]
    counted = [re.search(r"<br>(?:(\d+)%, )?mean of (\d+) rows$", p) for p in panels]
    assert all(counted) and all(1 < int(m.group(2)) <= q + 1 for m in counted), panels
    for p, m in zip(panels, counted):  # a role of named keys says the share they hold on average (one row of three
        named = any(role in p for role in ("previous token", "first token", "current token", "after a copy"))
        assert (m.group(1) is not None) == named and (not named or int(m.group(1)) >= 30), p  # once made it)
    said = shown(at, "Layer ")
    assert f"averaged over its {q + 1} query rows" in said


def test_a_head_named_after_a_copy_is_said_to_weigh_what_followed_the_copy_not_the_copy():
    """Issue 42: the sampling scenario labelled heads 'copy' beside 'head 2 gives that earlier copy the most weight
    (0.07)'. The role now says which key it weighs (the token after an earlier copy), and the look-back sentence
    names those heads and keys with the weights drawn."""
    at = fresh_app()
    scenario = next(x for x in SCENARIOS if x["title"].startswith("Sampling"))
    at.selectbox(key="step_scenario").set_value(scenario["title"]).run()
    open_view(at, "Attention")
    run = at.session_state["step_run"]
    ids = run.ids[0].tolist()
    found = 0
    for layer in range(run.lm.spec.layers):
        at.segmented_control(key="step_layer").set_value(layer).run()
        labels, keys, z, _ = chart(at)
        q = z.shape[1] - 1
        after = [p + 1 for p in range(q) if ids[p] == ids[q] and p + 1 < q - 1]
        said = shown(at, "appeared before, at position")
        copy_heads = [h for h, label in enumerate(labels) if label.endswith(" · after a copy")]
        assert not any(label.endswith(" · copy") for label in labels)
        if copy_heads:
            found += 1
            m = re.search(r"Heads? ([\d, ]+) \('after a copy'\) looks? instead at the token that followed an earlier "
                          r"\S+, at positions? (.*), with weights? ([\d., ]+) there\.$", said)
            assert m, said
            assert [int(h) for h in m.group(1).split(", ")] == copy_heads
            assert [int(k) for k in re.findall(r"(\d+) \(", m.group(2))] == after
            assert m.group(3) == ", ".join(f"{np.nansum(z[h][after]):.2f}" for h in copy_heads)
            for h in copy_heads:
                assert agrees(labels[h], z[h], q, ids, keys)
        named = re.search(r"head (\d+) gives that earlier \S+ the most weight of any head \(([\d.]+)\)", said)
        earlier = [p for p in range(q) if ids[p] == ids[q]][-1]
        assert named and float(named.group(2)) == pytest.approx(np.nanmax(z[:, earlier]), abs=0.006)
    assert found  # the scenario has heads that weigh what followed an earlier copy
