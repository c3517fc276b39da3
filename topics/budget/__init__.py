"""The KV cache on a budget: quantize it, evict from it, and measure what each costs in tokens.

    policies.py   the policies by name, the checks that refuse bad input, and `budget_cache` (the cache itself)
    quant.py      fp8 / int8 / int4: the newest B positions in full precision, the older ones rounded
    evict.py      window / sinks / heavy / heavy-avg / snap / snap-capped: which positions are held, a score says
    records.py    what a measurement returns: plain frozen records (no torch), what the pictures read
    measure.py    side by side with the full cache: bytes, teacher-forced agreement and KL, the parting step,
                  ms per decode step, the attention sink; `bench_rows` for `python -m engine bench`
    stories.py    every policy over several held-out stories, fp32 and bf16: intervals, ties, fp8's saturation
    draw.py       the cache per layer (evicted greyed, quantized hatched), divergence charts: records in, figures out
    cli.py        `python -m engine budget ...`
    page.py       the Streamlit page (the only file here that imports streamlit)

Nothing is imported here, so the page can import draw.py without loading torch.
"""
