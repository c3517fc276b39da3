"""`python -m tools.train` makes a folder that loads and generates with nothing but transformers."""

from __future__ import annotations

import json

from engine import Stepper, load_model
from tests.conftest import TINY_TEXT
from tools.train import main as train_main


def test_train_on_a_tiny_corpus_produces_a_loadable_model(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n<|endoftext|>\n".join(TINY_TEXT * 3) + "\n<|endoftext|>\n")
    out = tmp_path / "model"
    rc = train_main(["--corpus", str(corpus), "--out", str(out), "--arch", "llama", "--vocab-size", "300",
                   "--d-model", "32", "--layers", "1", "--heads", "4", "--kv-heads", "2", "--d-ff", "64",
                   "--context", "64", "--seq-len", "32", "--batch", "4", "--steps", "6", "--eval-every", "3",
                   "--holdout-stories", "5", "--eval-file", str(corpus)])
    assert rc == 0
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json", "README.md"):
        assert (out / name).is_file(), name
    report = json.loads((out / "training_report.json").read_text())
    assert [h["step"] for h in report["history"]] == [3, 6]
    assert report["metrics"]["eval"]["bits_per_byte"] > 0
    assert "bits per byte" in (out / "README.md").read_text()

    lm = load_model(str(out))
    assert lm.spec.attention == "GQA"
    s = Stepper(lm, "Once upon a time", max_new_tokens=5, stop_on_eos=False)
    s.run()
    assert len(s.generated_ids) == 5
    assert s.ids[0, 0].item() == lm.tokenizer.bos_token_id  # prompts start with BOS, as training stories did


def test_training_is_reproducible(tmp_path):
    from tools.train import TrainConfig, train

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n<|endoftext|>\n".join(TINY_TEXT * 3))
    cfg = dict(corpus=str(corpus), vocab_size=300, d_model=32, layers=1, heads=4, kv_heads=2, d_ff=64,
               context=64, seq_len=32, batch=4, steps=4, eval_every=4, holdout_stories=5, seed=3)
    a = train(TrainConfig(out=str(tmp_path / "a"), **cfg), log=lambda *_: None)
    b = train(TrainConfig(out=str(tmp_path / "b"), **cfg), log=lambda *_: None)
    assert a["history"] == b["history"]
