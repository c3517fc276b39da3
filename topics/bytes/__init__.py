"""Bytes are time: the lean pass with its weights stored in fewer bytes, and its KV cache grown and evicted.

    storage.py   the lean pass over a converted copy of a rung's weights (fp32, bf16, fp16, int8 weight-only),
                 and the bytes it reads, counted from its tensors
    measure.py   decode and prefill timed per storage in rounds beside the roof's probes; the context's line;
                 the damage in tokens on the bundled models
    records.py   what a measurement returns (frozen records, no torch), the line fitted, read back from JSON
    draw.py      the figures, tables and sentences, pure functions of a record
    page.py      the Scale page's section; cli.py: `python -m engine bytes`
"""
