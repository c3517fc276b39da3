"""Shared fixtures: tiny random models for architecture coverage, the bundled model for realism, and the
system parts the slower tiers need (system Chromium; redis-server and nginx).

Tiers (README, "Install, run, test"): a test is marked `browser`, `system` or `gpu` here, from the fixtures it
uses (TIER_OF_FIXTURE), so a new test lands in its tier by asking for what it needs; `slow` is marked by hand on
the tests that take long on a 2-core machine, and `perf` on every test that asserts a time (how fast a probe,
a draw or a refusal is): the other tiers assert behaviour only, whatever the minute. A missing system part fails the test that needs it
with the one command that installs it. The `gpu` tier runs only when `-m` names it (`-m gpu`, or
`python -m engine gpu-check`): a run that does not ask for it deselects it, on any machine.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the network

import pytest

if TYPE_CHECKING:
    import torch


def pytest_configure(config):
    """Every model the tests run is small: one intra-op thread, as the app gives a small model (physics/machine.py,
    serving_threads). Two threads on a shared 2-core machine stall each other: measured here at load ~6, the fast
    tier's engine modules took 107 s with 2 threads and 30 s with 1.

    pytest-xdist's controller runs no test, so it does not import torch (or the engine) at all: the workers start
    ~2 s sooner. Every process that runs tests sets the thread count before it collects a test module, and turns the
    garbage collector off until collection is done (pytest_collection_finish).

    Triton, where it is imported, runs in its interpreter (CPU tensors, numpy), except when the gpu tier is asked
    for: tests/test_gpu_kernels.py checks the GPU's int8 and int4 kernels that way. It is set before anything
    imports Triton (inductor does, to compile), since the interpreter has to be on when its language is made."""
    if "gpu" not in (config.option.markexpr or ""):
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return
    import gc

    gc.disable()
    import torch

    torch.set_num_threads(1)

TINY_TEXT = [
    "Once upon a time there was a little cat named Tom. Tom liked to play in the sun.",
    "One day, a girl found a red ball in the park. She was very happy and ran home.",
    "The dog and the bird were friends. They played every day by the big tree.",
] * 10


# ---------------------------------------------------------------- tiers: a test's marker follows from its fixtures

TIER_OF_FIXTURE = {  # a test that uses one of these, itself or through another fixture, is in that tier
    "chromium": "browser",  # the system Chromium, driven by Playwright (the `browser` fixture launches it)
    "server": "browser",  # `streamlit run app.py` in a subprocess, for the browser to open
    "fresh_server": "browser",  # the same, started for one test
    "keyed_server": "browser",  # the same with a lecturer key (tests/test_follow.py, tests/test_browser_class.py)
    "redis_server": "system",  # a redis-server on loopback (tests/test_follow.py, tests/test_deploy.py)
    "nginx": "system",  # nginx in front of app replicas (tests/test_deploy.py)
    "load_report": "system",  # tests/load.py: its own app server and a classroom of browser sessions
    "cuda": "gpu",  # a CUDA GPU (tests/test_gpu.py): lean tokens, CUDA graphs, the exact race on the device
}
ASKED_ONLY = ("gpu",)  # tiers that run only when -m names them: deselected from every other run


def pytest_collection_finish(session):
    """Everything collection imported (torch, transformers, Streamlit, the engine, every test module) lives until
    the process ends: keep it out of every later garbage-collection pass, as the app does once its model is loaded
    (ui/model.py). The engine collects after each big measurement (physics/machine.py, release_memory), and each pass
    over a heap this size takes a tenth of a second or more. While the heap was growing the collector was off
    (pytest_configure): with it on, a worker's collection made fourteen full passes over it, ~2.4 s of CPU."""
    import gc

    gc.freeze()
    gc.enable()


def pytest_collection_modifyitems(config, items):
    for item in items:
        tiers = sorted({TIER_OF_FIXTURE[name] for name in item.fixturenames if name in TIER_OF_FIXTURE})
        for tier in tiers:
            item.add_marker(tier)
        if set(tiers) & {"browser", "system"}:  # pytest.ini runs two workers (pytest-xdist, --dist loadgroup): every browser and system test in
            # one of them, in turn, as one person at one screen would; the engine and AppTest tests share the other
            # (and this one, once it is free). One app server per worker, no two browsers timing each other.
            item.add_marker(pytest.mark.xdist_group("browser"))
    asked = config.getoption("markexpr", "") or ""
    unasked = [item for item in items if any(item.get_closest_marker(tier) and tier not in asked for tier in ASKED_ONLY)]
    if unasked:
        config.hook.pytest_deselected(items=unasked)
        items[:] = [item for item in items if item not in unasked]


# ---------------------------------------------------------------- system parts: found, or one line on how to get them

PARTS = {  # fixture -> (program, the variable that may point at another one, the Debian/Ubuntu package)
    "chromium": ("chromium", "DECODE_LAB_CHROMIUM", "chromium"),
    "redis_server": ("redis-server", "DECODE_LAB_REDIS_SERVER", "redis-server"),
    "nginx": ("nginx", "DECODE_LAB_NGINX", "nginx"),
}


def system_part(fixture: str) -> str:
    """The path of an installed program; otherwise the test fails with the command that installs it."""
    from deploy.serve import Missing, binary

    program, env, package = PARTS[fixture]
    try:
        return binary(program, env, package)
    except Missing:
        pass  # fail outside the handler: one line, no chained traceback
    pytest.fail(f"{program} is not installed: `sudo apt-get install {package}` (Debian/Ubuntu), "
                f"or set {env}=/path/to/{program}", pytrace=False)


@pytest.fixture(scope="session")
def chromium() -> str:
    """The system Chromium (never a browser download): DECODE_LAB_CHROMIUM, else chromium on the PATH."""
    return system_part("chromium")


@pytest.fixture(scope="session")
def cuda() -> torch.device:
    """The CUDA GPU; on a machine without one, each gpu test fails at once with this one line."""
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda")
    pytest.fail("no CUDA GPU on this machine: the gpu tier runs on one (there: `python -m engine gpu-check`, "
                "or `python -m pytest -m gpu tests/test_gpu.py`)", pytrace=False)


@pytest.fixture(scope="session")
def redis_server() -> str:
    return system_part("redis_server")


@pytest.fixture(scope="session")
def nginx() -> str:
    return system_part("nginx")


BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser(chromium):
    """The system Chromium under Playwright, one per test module."""
    from playwright.sync_api import Error, sync_playwright

    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=chromium, args=BROWSER_FLAGS)
        except Error as e:
            failed = str(e).strip().splitlines()[0]
        else:
            yield b
            b.close()
            return
    pytest.fail(f"Chromium at {chromium} did not start under Playwright: {failed}", pytrace=False)


def _app_server(tmp_path_factory):
    from tests.appserver import free_port, start_app, stop

    log = tmp_path_factory.mktemp("server") / "streamlit.log"
    port = free_port()
    proc = start_app(port, log=open(log, "w"))
    yield f"http://127.0.0.1:{port}"
    stop(proc)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """`streamlit run app.py` on a free loopback port, shared by the browser tests as a class shares one server
    (one model load, one warm-up); stopped at the end of the session."""
    yield from _app_server(tmp_path_factory)


@pytest.fixture
def fresh_server(tmp_path_factory):
    """An app server of the test's own, for a claim about a server's very first request."""
    yield from _app_server(tmp_path_factory)


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    """`streamlit run app.py` with a lecturer key (tests.appserver.KEY), on a free loopback port."""
    from tests.appserver import KEY, free_port, start_app, stop

    log = tmp_path_factory.mktemp("follow-server") / "streamlit.log"
    port = free_port()
    proc = start_app(port, log=open(log, "w"), DECODE_LAB_LECTURER_KEY=KEY)
    yield f"http://127.0.0.1:{port}"
    stop(proc)


# ---------------------------------------------------------------- a class's store: this process's, or Redis


class Clock:
    """A clock the test moves by hand: hours of idling in no time."""

    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory, redis_server):
    from deploy.serve import start_redis

    proc, url = start_redis(tmp_path_factory.mktemp("redis"), redis_bin=redis_server)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.system)])
def store(request):
    """(a fresh store, its clock): this process's MemoryKV, or a real redis-server (the system tier)."""
    from classroom import MemoryKV

    clock = Clock()
    if request.param == "memory":
        return MemoryKV(clock=clock), clock, request.param
    import redis

    kv = redis.Redis.from_url(request.getfixturevalue("redis_url"), decode_responses=True)
    kv.flushdb()
    return kv, clock, request.param


# ---------------------------------------------------------------- this machine's roof, probed short

@pytest.fixture(scope="session", autouse=True)
def short_roof_probe():
    """Pages quote the roof their process probed once (ui/model.py, device_roof: 0.6 s of matmuls, then buffers of
    16 MiB to 1 GiB filled and moved three ways, ~3.5 s on the 2-core reference machine, in each worker). What a test
    reads is which side of that roof's ridge a step falls and that every page quotes the same one, not how fast this
    machine is: here the probe takes 0.2 s a half over buffers of 16 and 64 MiB (the second past a 32 MiB last-level
    cache), as tests/test_curve.py's quick_probe shortens it. tests/test_scale.py checks the probe itself."""
    from physics import roofline

    probed = roofline.device_roof

    def device_roof(device, dtype, budget_s: float = 0.6, again: bool = False):
        return probed(device, dtype, budget_s=min(budget_s, 0.2), again=again)

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(roofline.COPY_MIB, "cpu", (16, 64))
        mp.setattr(roofline, "device_roof", device_roof)
        yield


# ---------------------------------------------------------------- models

@pytest.fixture(scope="session")
def bundled_lm():
    """The bundled default model: trained weights, real text."""
    from engine.load.load import load_model

    return load_model("default", device="cpu")


@pytest.fixture(scope="session")
def bundled_dir():
    from engine.load.load import MODELS_DIR

    return MODELS_DIR


# ---------------------------------------------------------------- one tiny random model per family
#
# Every family the engine claims to step, each small enough to run 40 tokens in well under a second:
# hidden 32, 2-6 layers, 64 positions. Gemma 2 and Gemma 3 have sliding_window=4, so a 40-token run
# slides the window many times; Gemma 2 alternates sliding/full layers and soft-caps its logits;
# Gemma 3 keeps transformers' default layer_types (five sliding layers to one full one).

FAMILIES = ("gpt2", "llama", "llama-mqa", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "gpt_neox", "opt")
SLIDING_WINDOW = 4


def _family_model(family: str, ids: dict):
    import transformers as tf

    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=64, **ids)
    if family == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, **ids))
    if family == "llama":  # GQA: 4 query heads share 2 K/V heads
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **small))
    if family == "llama-mqa":  # MQA: 4 query heads share 1 K/V head
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=1, **small))
    if family == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(num_key_value_heads=2, **small))
    if family == "qwen3":  # per-head q/k RMSNorm; head_dim is its own figure (default 128)
        return tf.Qwen3ForCausalLM(tf.Qwen3Config(num_key_value_heads=2, head_dim=8, **small))
    if family == "gemma2":  # layers alternate sliding (window 4) / full; attention and final logits soft-capped
        return tf.Gemma2ForCausalLM(tf.Gemma2Config(
            **{**small, "num_hidden_layers": 4}, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8,
            sliding_window=SLIDING_WINDOW, attn_logit_softcapping=50.0, final_logit_softcapping=30.0))
    if family == "gemma3":  # default layer_types: 5 sliding (window 4) + 1 full
        return tf.Gemma3ForCausalLM(tf.Gemma3TextConfig(
            **{**small, "num_hidden_layers": 6}, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8,
            sliding_window=SLIDING_WINDOW))
    if family == "phi3":  # fused qkv projection
        return tf.Phi3ForCausalLM(tf.Phi3Config(num_key_value_heads=2, original_max_position_embeddings=64, **small))
    if family == "gpt_neox":  # fused qkv, partial rotary, parallel residual
        return tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(**small))
    if family == "opt":  # learned positions with an offset of 2, no RoPE
        return tf.OPTForCausalLM(tf.OPTConfig(hidden_size=32, ffn_dim=64, word_embed_proj_dim=32,
                                              num_hidden_layers=2, num_attention_heads=4,
                                              max_position_embeddings=64, **ids))
    raise ValueError(f"unknown family {family!r}")


def _save_family(path, family: str, tok) -> str:
    eos = tok.eos_token_id
    model = _family_model(family, dict(vocab_size=len(tok), bos_token_id=eos, eos_token_id=eos, pad_token_id=eos))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory):
    """Family name -> a saved tiny random model folder (safetensors + the tiny tokenizer), built once a session."""
    import torch

    from tools.train import train_tokenizer

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("families")
    tok = train_tokenizer(TINY_TEXT, 300)
    return {family: _save_family(root / family, family, tok) for family in FAMILIES}


@pytest.fixture(scope="session")
def tiny_dirs(family_dirs):
    """GPT-2 (MHA) and Llama (GQA: 4 query heads share 2 KV heads): the first two families' folders."""
    return {arch: family_dirs[arch] for arch in ("gpt2", "llama")}


@pytest.fixture(scope="session")
def family_model(family_dirs):
    """family_model(name): that family's tiny model, loaded through the real loader on the CPU once a session."""
    from engine.load.load import load_model

    loaded = {}

    def load(family: str):
        if family not in loaded:
            loaded[family] = load_model(family_dirs[family], device="cpu")
        return loaded[family]

    return load


@pytest.fixture(scope="session", params=["gpt2", "llama"])
def tiny_lm(request, family_model):
    """A tiny random model of each architecture, loaded through the real loader (the same object as family_lm)."""
    return family_model(request.param)


@pytest.fixture(scope="session", params=FAMILIES)
def family_lm(request, family_model):
    """Each family's tiny model, loaded through the real loader on the CPU."""
    return family_model(request.param)


# ------------------------------------------------------------------ a server opened up, or cut off


@pytest.fixture
def open_policy(monkeypatch):
    """A single-user machine: `streamlit run app.py -- --open-models`."""
    import ui.model
    from engine.load.load import bundled_models
    from engine.load.policy import ModelPolicy

    policy = ModelPolicy(offered=tuple(bundled_models()), open=True)
    monkeypatch.setattr(ui.model, "POLICY", policy)  # every page reads ui.model.POLICY when it draws
    return policy


@pytest.fixture
def no_network(monkeypatch):
    """Any connection or name lookup for a host that is not this machine is recorded and refused.

    The hub's own offline switch is turned off too, so a lookup the code makes would really be tried.
    """
    import huggingface_hub.constants

    attempts = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def local(host) -> bool:
        host = host.decode() if isinstance(host, bytes) else host
        return host is None or str(host).startswith("127.") or str(host) in ("::1", "localhost", "")

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else str(address)
        if self.family != socket.AF_UNIX and not local(host):
            attempts.append(address)
            raise OSError(f"outbound connection to {address} blocked by the test")
        return real_connect(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if not local(host):
            attempts.append(host)
            raise socket.gaierror(f"name lookup of {host} blocked by the test")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("DECODE_LAB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    return attempts
