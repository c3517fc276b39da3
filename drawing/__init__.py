"""What several pages draw, from the core's records (a StepTrace, a run's records): one palette, the stage
(SVG), the step's views, tokens, attention and what each head does there, matmuls, the KV cache, latency. Pure
functions, record in, picture out; the core (engine/) imports none of it, and nothing here imports streamlit."""
