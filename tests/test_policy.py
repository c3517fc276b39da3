"""Which models a browser may load: the bundled ones, plus what the teacher named; nothing else is looked up."""

from __future__ import annotations

import pytest

import engine.load.load
from engine.errors import ModelNotOffered
from engine.load.policy import from_settings
from tests.models import NOT_OFFERED, OTHER
from tests.safety import messages, prefill_works
from tests.test_app import click, fresh_app, new_tokens
from ui.apptest import app_test

# ------------------------------------------------------------------ the allow-list


def test_the_policy_offers_bundled_models_plus_what_the_teacher_named(tmp_path):
    bundled = engine.load.load.bundled_models()
    default = from_settings([], {})
    assert default.offered == tuple(bundled) and not default.open
    named = from_settings(["--model", "Qwen/Qwen2.5-0.5B", "--model", str(tmp_path)], {"DECODE_LAB_MODELS": "a/b, c"})
    assert named.offered == (*bundled, "Qwen/Qwen2.5-0.5B", str(tmp_path), "a/b", "c") and not named.open
    assert from_settings(["--open-models"], {}).open and from_settings([], {"DECODE_LAB_OPEN_MODELS": "1"}).open
    # a teacher's lock wins over an open flag
    assert not from_settings(["--open-models"], {"DECODE_LAB_BUNDLED_ONLY": "1"}).open
    # one message for everything not offered: nothing is looked up, so nothing is revealed
    said = set()
    for source in (str(tmp_path), "/no/such/folder", "/etc", "/etc/shadow", "some-org/some-model", "", "x" * 10_000):
        with pytest.raises(ModelNotOffered) as e:
            default.check(source)
        said.add(str(e.value))
    assert len(said) == 1 and "/" not in said.pop().split("(")[0]


@pytest.mark.slow
def test_a_default_server_refuses_every_folder_a_link_names_with_one_message(tmp_path, bundled_dir, no_network):
    """Existing folder, missing folder, /etc and a hub id: the same visible words, no lookup, and the
    bundled model keeps working. The sidebar has no box to type a folder into."""
    import ui.model

    assert not ui.model.POLICY.open  # the server as `streamlit run app.py` starts it
    real = tmp_path / "a-real-model"
    real.mkdir()
    (real / "config.json").write_text((bundled_dir / "tinystories-llama" / "config.json").read_text())
    seen_by_link = {}
    for source in (str(real), str(tmp_path / "no-such-folder"), "/etc", "some-org/some-model"):
        at = app_test()
        at.query_params = {"model": source}
        at.run()
        assert not at.exception
        seen_by_link[source] = messages(at)
        assert at.sidebar.selectbox(key="side_model").value == "tinystories-llama"
        assert OTHER not in at.sidebar.selectbox(key="side_model").options
        assert not [t for t in at.sidebar.text_input if t.key == "side_custom"]
    assert all(m == [NOT_OFFERED] for m in seen_by_link.values()), seen_by_link
    prefill_works(at)
    assert no_network == []


@pytest.mark.slow
def test_a_model_the_teacher_named_is_offered_and_loads(tiny_dirs, monkeypatch):
    import ui.model

    folder = tiny_dirs["llama"]
    monkeypatch.setattr(ui.model, "POLICY", from_settings(["--model", folder], {}))
    at = fresh_app()
    assert folder in at.sidebar.selectbox(key="side_model").options
    at.sidebar.selectbox(key="side_model").set_value(folder).run()
    assert not at.exception and not messages(at)
    click(at, "step_btn_prefill")
    assert new_tokens(at) == 1
    linked = app_test()  # a link may name it too
    linked.query_params = {"model": folder}
    linked.run()
    assert not messages(linked) and linked.sidebar.selectbox(key="side_model").value == folder
