"""Heads are named for what their measured weights do: previous token, first token, copy, current, broad."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.measure.attention import ORDER, earlier_copies, head_roles, roles_sentence

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
    assert roles == {0: "previous token", 1: "first token", 2: "copy", 3: "current token", 4: "broad",
                     5: "looks at"}


def test_a_role_read_from_many_rows_is_averaged_and_a_head_with_none_is_mixed():
    rows = 4  # query positions 4..7 of a prefill
    prev = [[one_hot(q - 1)[k] if k <= q else 0.0 for k in range(8)] for q in range(4, 8)]
    scattered = [one_hot(p, weight=0.35) for p in (3, 0, 5, 2)]
    t = step([prev, scattered])
    roles = head_roles(t, 0, IDS)
    assert [r.role for r in roles] == ["previous token", "mixed"]
    assert roles_sentence(roles, [str(i) for i in IDS], 0, rows).startswith(f"Layer 0, averaged over its {rows}")


def test_the_sentence_names_every_head_once_grouped_by_role():
    t = step([one_hot(6), one_hot(6), one_hot(0), [1 / 8] * 8])
    text = roles_sentence(head_roles(t, 0, IDS), [f"p{i}" for i in range(8)], 0)
    assert "previous token: heads 0, 1" in text and "first token: head 2" in text and "broad: head 3" in text
    assert text.index("previous token") < text.index("first token") < text.index("broad")


@pytest.mark.parametrize("steps", [0, 3])
def test_every_head_of_the_bundled_model_gets_a_role_from_its_pattern(bundled_lm, steps):
    from engine import Stepper

    run = Stepper(bundled_lm, "Tom had a red ball. Tom liked to play with the ball. One day, Tom",
                  max_new_tokens=8, stop_on_eos=False)
    run.run(steps + 1)
    t = run.records[-1]
    for layer in range(bundled_lm.spec.layers):
        roles = head_roles(t, layer, run.ids[0].tolist())
        assert [r.head for r in roles] == list(range(bundled_lm.spec.heads))
        assert all(r.role in ORDER or r.role == "looks at" for r in roles)
        assert all(0.0 <= r.weight <= 1.0 + 1e-3 for r in roles)


def test_the_attention_picture_names_each_head_by_its_role_beside_its_number(bundled_lm):
    """The roles are on the heatmap's head axis, so a projector shows them with the picture (the sentence under it
    fell below the first screen at 1280x720)."""
    from engine import Stepper
    from drawing.views import StepContext, view_blocks

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
