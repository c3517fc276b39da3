"""The libraries' internals live in one module each, written against one version (engine/torch_internals.py,
engine/transformers_internals.py, ui/streamlit_internals.py): these fail, saying what to check, when another version is installed, and
name an internal that is gone or means something else, so an upgrade starts in one file."""

from __future__ import annotations

import pytest
import torch

from engine import torch_internals, transformers_internals
from ui import streamlit_internals

MODULES = {"torch": torch_internals, "transformers": transformers_internals, "streamlit": streamlit_internals}
WHERE = {"torch": "engine/", "transformers": "engine/", "streamlit": "ui/"}


@pytest.mark.parametrize("library", MODULES)
def test_the_installed_library_is_the_one_its_internals_module_was_written_against(library):
    problem = MODULES[library].version_problem()
    assert problem is None, problem


@pytest.mark.parametrize("library", MODULES)
def test_another_version_is_refused_with_the_file_to_check(library, monkeypatch):
    module = MODULES[library]
    monkeypatch.setattr(module, "WRITTEN_FOR", "0.1")
    problem = module.version_problem()
    assert problem is not None
    assert f"{WHERE[library]}{library}_internals.py" in problem and f"{library} 0.1" in problem and "WRITTEN_FOR" in problem


def test_the_torch_internals_named_are_there():
    missing = [name for name, found in [
        ("torch._dynamo.config.recompile_limit", lambda: torch._dynamo.config.recompile_limit),
        ("torch._dynamo.mark_dynamic", lambda: torch._dynamo.mark_dynamic),
    ] if not _there(found)]
    assert not missing, f"gone from torch {torch.__version__}: {missing} (engine/torch_internals.py uses them)"
    before = torch._dynamo.config.recompile_limit
    torch_internals.allow_recompiles(before + 1)
    try:
        assert torch._dynamo.config.recompile_limit == before + 1
    finally:
        torch._dynamo.config.recompile_limit = before
    assert torch_internals.graph_skips() >= 0
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import parallel_num_threads

    before = inductor_config.cpp.threads
    with torch_internals.inductor_cpu_threads(3):
        assert parallel_num_threads() == 3  # what inductor's C++ kernels are compiled for, whatever torch's count
    assert inductor_config.cpp.threads == before


def _there(get) -> bool:
    try:
        get()
    except (AttributeError, RuntimeError):
        return False
    return True


def _tiny_llama():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, max_position_embeddings=32)


def test_the_static_cache_is_allocated_early_and_rewound_by_its_write_position():
    from transformers import StaticCache

    cache = StaticCache(config=_tiny_llama(), max_cache_len=8)
    transformers_internals.allocate_static(cache, 1, 1, 8, torch.float32, torch.device("cpu"))
    assert all(layer.is_initialized and tuple(layer.keys.shape) == (1, 1, 8, 8) for layer in cache.layers)
    k = torch.ones(1, 1, 3, 8)
    for layer in cache.layers:
        layer.update(k, k)
    assert all(int(layer.cumulative_length) == 3 for layer in cache.layers), "StaticLayer no longer counts its writes"
    transformers_internals.set_write_position(cache, 1)
    for layer in cache.layers:
        layer.update(2 * k[:, :, :1], 2 * k[:, :, :1])  # written at position 1, over the first update's row
        assert layer.keys[0, 0, :, 0].tolist() == [1, 2, 1, 0, 0, 0, 0, 0]


def test_a_cache_layer_of_our_own_keeps_what_it_has_seen_under_the_name_reset_zeroes():
    layer = transformers_internals.OwnLayer()
    layer.seen = 5
    assert layer.cumulative_length == 5
    layer.reset()
    assert layer.seen == 0, "transformers' reset() no longer zeroes cumulative_length: OwnLayer.seen must say so"


def test_attention_config_and_hub_internals_are_there(tmp_path):
    from transformers import LlamaForCausalLM
    from transformers.masking_utils import eager_mask  # noqa: F401 - registered beside our attention

    config = _tiny_llama()
    assert transformers_internals.routes_attention(config), "the Llama modeling file no longer has its eager attention"
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    attention = model.model.layers[1].self_attn
    assert transformers_internals.layer_index(attention) == 1
    assert callable(transformers_internals.eager_attention(attention))
    assert transformers_internals.supports_sdpa(model)
    assert transformers_internals.attn_implementation(model.config) in ("sdpa", "eager")
    assert not transformers_internals.compiled_by_generate(model)
    kinds, kwargs = transformers_internals.layer_kinds(config)
    assert kinds == ["full_attention"] * 2 and len(kwargs) == 2
    assert transformers_internals.hub_file(str(tmp_path), "config.json", local_only=True) is None  # absent: None
    (tmp_path / "config.json").write_text("{}")
    found = transformers_internals.hub_file(str(tmp_path), "config.json", local_only=True)
    assert found == str(tmp_path / "config.json")


def test_apptests_scan_the_installed_packages_for_components_once_a_process(monkeypatch):
    """ui/apptest.py keeps Streamlit's component scan for the process (an internal of streamlit 1.67, as a real
    server scans once at start): a second AppTest finds the scan done. If Streamlit stops calling the scan through
    `manifest_scanner.scan_component_manifests`, every AppTest scans again (0.13 s each) and this says so."""
    from streamlit.components.v2 import manifest_scanner
    from streamlit.testing.v1 import AppTest

    from ui import apptest

    assert hasattr(manifest_scanner.scan_component_manifests, "scans"), "ui/apptest.py did not keep the scan"
    scans = []
    monkeypatch.setattr(manifest_scanner, "scan_component_manifests",
                        apptest._scanned_once(lambda max_workers=None: scans.append(1) or []))
    for _ in range(2):
        at = AppTest.from_string("import streamlit as st\nst.write('hello')").run()
        assert not at.exception and at.markdown[0].value == "hello"
    assert scans == [1], f"streamlit scanned for components {len(scans)} times: ui/apptest.py's _scanned_once " \
                         "no longer reaches the scan AppTest runs"


def test_an_apptest_waits_for_its_run_on_the_script_thread_and_still_times_out():
    """ui/apptest.py waits for each AppTest run on its script thread (Streamlit 1.67's LocalScriptRunner polls every
    millisecond): a run is read when done, and one that outlasts the AppTest's timeout is stopped with Streamlit's
    own message."""
    from streamlit.testing.v1 import AppTest, local_script_runner

    from ui import apptest

    assert local_script_runner.require_widgets_deltas is apptest._wait_for_the_run, "ui/apptest.py's wait is not used"
    at = AppTest.from_string("import time\nimport streamlit as st\ntime.sleep(0.2)\nst.write('done')").run()
    assert not at.exception and at.markdown[0].value == "done"
    slow = AppTest.from_string("import time\nimport streamlit as st\nfor _ in range(500):\n    time.sleep(0.01)\n"
                               "    st.empty()  # a point where the stop asked for is taken", default_timeout=0.3)
    with pytest.raises(RuntimeError, match=r"timed out after 0.3\(s\)"):
        slow.run()


def test_the_streamlit_internals_named_are_there():
    """Each internal ui/streamlit_internals.py names, where it says: a page copied for the class reads the run's
    context, its widget values and its tables; AppTest's scan and wait are replaced at the names it gives."""
    import pandas as pd
    import pyarrow as pa
    from streamlit.components.v2 import manifest_scanner
    from streamlit.testing.v1 import AppTest, local_script_runner

    assert streamlit_internals.script_context() is None  # outside a script run
    at = AppTest.from_string(
        "import streamlit as st\n"
        "from ui import streamlit_internals as si\n"
        "st.slider('n', 0, 9, 4, key='n')\n"
        "ctx = si.script_context()\n"
        "st.text(str(ctx is not None and si.widget_state(ctx)['n'] == 4 and callable(ctx.enqueue)))\n").run()
    assert not at.exception and [t.value for t in at.text] == ["True"]
    assert {(c.__module__, c.__name__) for c in streamlit_internals.RUN_ENDINGS} == {
        ("streamlit.runtime.scriptrunner_utils.exceptions", "StopException"),
        ("streamlit.runtime.scriptrunner_utils.exceptions", "RerunException")}
    sink = pa.BufferOutputStream()
    table = pa.Table.from_pandas(pd.DataFrame({"a": [1, 2]}))
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    assert streamlit_internals.arrow_table(sink.getvalue().to_pybytes())["a"].tolist() == [1, 2]
    assert hasattr(manifest_scanner, "scan_component_manifests") and hasattr(local_script_runner,
                                                                            "require_widgets_deltas")
    runner = local_script_runner.LocalScriptRunner
    assert all(callable(getattr(runner, name, None)) for name in ("script_stopped", "request_stop", "join"))
