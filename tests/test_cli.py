"""The command lines: every refusal is one line on stderr and exit status 2, before any work is done."""

from __future__ import annotations

from pathlib import Path

import pytest

import engine.load.load
from tests.models import GOOD

# ------------------------------------------------------------------ the command line


def _cli(argv, capsys):
    from commands.main import main as engine_main
    from tools.train import main as train_main

    main = (lambda a: train_main(a[1:])) if argv[:1] == ["train"] else engine_main  # python -m tools.train ...
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusals
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_model_load(monkeypatch):
    """The CLI must refuse before loading: any load fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the refusal")

    monkeypatch.setattr(engine.load.load, "load_model", refuse)


@pytest.mark.parametrize("command", [["run", "--prompt", "hi"], ["compare", "--prompt", "hi"], ["bench", "--no-app"],
                                     ["speculate", "--prompt", "hi"]])
def test_cli_refuses_an_unwritable_json_path_before_the_run(command, tmp_path, capsys, no_model_load):
    paths = [str(tmp_path / "no-such-folder" / "x.json"), str(tmp_path)]
    if Path("/proc/self").is_dir():
        paths.append("/proc/decode-lab.json")  # cannot be created, even by root (who passes every access check)
    for path in paths:
        code, out, err = _cli(command + ["--json", path], capsys)
        assert code == 2 and err.startswith("error: --json") and err.count("\n") == 1, (path, err)
        assert "Traceback" not in err and not out
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_cli_bench_refuses_lengths_and_rounds_below_one(capsys, no_model_load):
    for argv in (["--lengths", "0"], ["--lengths", "-5"], ["--rounds", "0"]):
        code, out, err = _cli(["bench", "--no-app", *argv], capsys)
        assert code == 2 and "invalid positive value" in err and "Traceback" not in err


@pytest.mark.parametrize("tokens", ["-5", "0", str(10**12)])
def test_cli_kv_size_refuses_figures_no_model_has(tokens, capsys):
    code, out, err = _cli(["kv-size", "--model", "Llama-3-8B", "--tokens", tokens], capsys)
    assert code == 2 and not out and err.startswith("error: tokens must be a whole number") and err.count("\n") == 1


def test_cli_kv_size_refuses_server_files_as_models(capsys):
    for source in ("/etc/shadow", "/etc", "/no/such/folder"):
        code, out, err = _cli(["kv-size", "--model", source, "--tokens", "8"], capsys)
        assert code == 2 and not out and err.startswith("error: ") and err.count("\n") == 1, err


def test_cli_top_k_0_means_off_and_keeps_greedy(capsys):
    runs = []
    for extra in ([], ["--top-k", "0"]):
        code, out, err = _cli(["run", "--prompt", GOOD, "--steps", "8", "--device", "cpu", *extra], capsys)
        assert code == 0
        runs.append(out.split("\n\n")[0])  # the generated text
    assert runs[0] == runs[1]
    code, out, err = _cli(["run", "--prompt", GOOD, "--steps", "8", "--top-k", "-1"], capsys)
    assert code == 2 and "top-k" in err


def test_cli_refuses_an_unknown_device_in_one_line(capsys):
    code, out, err = _cli(["run", "--prompt", "hi", "--device", "nosuch"], capsys)
    assert code == 2 and err.startswith("error: Unknown device") and "Traceback" not in err


def test_cli_rejects_a_seed_that_is_not_a_number(capsys):
    code, out, err = _cli(["run", "--prompt", "hi", "--seed", "abc"], capsys)
    assert code == 2 and "invalid int value" in err


@pytest.mark.parametrize("corpus, why", [
    (None, "not a file"),
    (b"", "0 stories"),
    (b"<|endoftext|>\n  \n<|endoftext|>", "0 stories"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 50, "not UTF-8"),
    ("Once upon a time.\x00<|endoftext|>".encode() * 20, "NUL bytes"),
    (b"One story only.", "1 stories"),
])
def test_cli_train_refuses_an_unusable_corpus_and_creates_nothing(corpus, why, tmp_path, capsys):
    path = tmp_path / "corpus.txt"
    if corpus is not None:
        path.write_bytes(corpus)
    out_dir = tmp_path / "out" / "model"
    code, out, err = _cli(["train", "--corpus", str(path), "--out", str(out_dir), "--steps", "2"], capsys)
    assert code == 2 and why in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, why", [
    (["--steps", "0"], "--steps"), (["--eval-every", "0"], "--eval-every"), (["--heads", "3"], "divide"),
    (["--vocab-size", "10"], "--vocab-size"), (["--init-from", "/no/such/model"], "--init-from"),
])
def test_cli_train_refuses_settings_it_cannot_train_before_creating_anything(argv, why, tmp_path, capsys):
    path = tmp_path / "corpus.txt"
    path.write_text("<|endoftext|>".join(["Once upon a time there was a cat."] * 20))
    code, out, err = _cli(["train", "--corpus", str(path), "--out", str(tmp_path / "out"), *argv], capsys)
    assert code == 2 and why in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()
