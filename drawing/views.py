"""The seven views of a step, defined once: what each shows, built from the record.

A view is a list of blocks (a figure, a table, a picture, a line of text), each a pure function of the
recorded steps. The step page places them (step/page_views.py, which adds the few switches that only a live
run can answer), and a class's published pictures are made from the same blocks (classroom).

    view_blocks("Attention", StepContext(...))  ->  [Block("figure", go.Figure, "heads"), Block("md", ...), ...]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drawing.attention import assembled_attention, attention_heatmap, heads_figure, look_back
from drawing.caveats import latency_note
from drawing.characters import split_characters
from drawing.head_roles import AFTER_COPY, after_copies, earlier_copies, head_roles, roles_sentence
from drawing.heads import heads_svg
from drawing.kv import kv_frame, kv_grid_figure, kv_growth_figure
from drawing.latency import CLIMB, latency_figure, latency_trend, timing_callout, traces_frame, ttft_tpot_sentence
from drawing.matmuls import gpt2_shapes_frame, matmul_figure, shapes_frame
from drawing.palette import axis_labels, show_piece
from drawing.svg import picture_html
from drawing.tokens import next_token_figure, token_chips_html

VIEWS = ("Attention", "Next token", "Matmuls", "Shapes", "KV cache", "Latency", "Tokens")
VIEWS_WITH_LAYER = ("Attention", "Matmuls")  # the views that draw one layer (the rest, every layer or none)
STEP_COLUMNS = ["step", "phase", "token", "latency_ms", "forward_ms", "q_len", "kv_len"]  # the Latency view's table:
#   the bar's height (the pass and choosing its token), then the pass the stage quotes; the times before the shapes,
#   so a phone shows them without scrolling the table


@dataclass(frozen=True)
class Block:
    """One piece of a view.

    kind: figure (a plotly Figure) · table (a DataFrame) · html (engine-made HTML, user text escaped) ·
          md (engine-made markdown, no user text) · text (a line holding user text: shown inert) ·
          caption · note (an info box) · warn · metrics ([(label, value, help)]) · latex
    """

    kind: str
    value: object
    name: str = ""  # stable: a chart's widget key on the page, a picture's file name when published


@dataclass(frozen=True)
class StepContext:
    """What a view needs to know about the run around the step on screen."""

    records: tuple  # every recorded step up to and including the one shown
    ids: tuple[int, ...]  # the run's token ids so far (prompt and generated)
    pieces: tuple[str, ...]  # the text of each of them
    prompt_len: int
    prompt: str
    spec: object | None  # the model's ModelSpec (a follower's record may have none)
    text: str = ""  # the text up to this step
    layer: int = 0
    head: int = 0
    scale: float = 1.0
    labels: tuple[str, ...] = field(default=(), compare=False)
    pictures: bool = False  # a class's follower: every head drawn as a picture (drawing/heads.py), not a chart
    every_row: bool = False  # Attention at a prefill: every query row, one panel per head (not the newest row only)

    @property
    def t(self):
        return self.records[-1]

    def axis_labels(self) -> list[str]:
        return list(self.labels) or axis_labels(list(self.pieces))


def view_blocks(view: str, c: StepContext) -> list[Block]:
    """The blocks of one view at the step `c` shows."""
    return BUILDERS[view](c)


# ---------------------------------------------------------------- the seven views


def attention(c: StepContext) -> list[Block]:
    t, layer = c.t, c.layer
    if t.layers[layer].pattern is None:
        return [Block("note", t.attention_note)]
    ids = list(c.ids[: t.kv_len])
    newest = head_roles(t, layer, ids)  # the newest query's row alone: what a picture of one row per head draws
    if c.every_row and t.pattern_rows > 1:  # every recorded row, one panel per head: roles averaged over them
        roles = head_roles(t, layer, ids, every_row=True)  # (a follower's tab draws this chart too)
        blocks = [Block("figure", heads_figure(t, layer, c.axis_labels(), scale=c.scale, cols=2, newest_only=False,
                                               roles=role_names(c, roles)), "att_rows")]
    elif c.pictures:  # the same weights, printed in the cells: a follower's tab shows a picture in a few ms
        blocks = [Block("html", picture_html(heads_svg(t, layer, list(c.pieces), role_names(c, newest)),
                                             f"layer {layer}: every head's attention for the newest query",
                                             "dl-follow-heads"), "heads")]
        roles = newest
    else:
        roles = newest
        blocks = [Block("figure", heads_figure(t, layer, c.axis_labels(), scale=c.scale, cols=2,
                                                   newest_only=True, roles=role_names(c, roles)), "heads")]
    blocks += look_back_blocks(c, roles, newest)
    drawn = ("One panel per head, every query row of this pass; each head's role is averaged over the rows where it "
             "can be told apart (the count beside it)." if c.every_row and t.pattern_rows > 1 else
             "One row per head for the newest query, so the head that looks back at a name stands out; each head's "
             "role is read from that row alone.")
    return blocks + [Block("caption", "Each row is a query, each column a key it may look at; a row sums to 1. Grey "
                                      "is masked (the future, or outside a sliding window): never weighed, not a small weight. "
                                      + drawn)]


def one_head_every_step(c: StepContext) -> Block:
    """Attention's "one head, every step so far": the prefill's square plus one row per decode step, of the layer
    and head on screen (the lecturer's page draws it under its switch; a class's tab asks for it the same way)."""
    labels = c.axis_labels()
    z = assembled_attention(list(c.records), c.layer, c.head)
    return Block("figure", attention_heatmap(z, labels[: z.shape[0]], labels[: z.shape[1]],
                                             f"layer {c.layer}, head {c.head}", scale=c.scale), "att_all")


def role_names(c: StepContext, roles=None) -> dict[int, str]:
    """head -> its role in a few words ('previous token', 'looks at ·upon'; 'previous token<br>45%, mean of 3 rows'
    when averaged over several rows, a second line under a panel's title), for the picture's head labels. `roles`:
    head_roles already read (else the newest row's)."""
    if roles is None:
        roles = head_roles(c.t, c.layer, list(c.ids[: c.t.kv_len]))

    def name(r) -> str:
        said = f"looks at {show_piece(c.pieces[r.key_pos])}"[:24] if r.role == "looks at" else r.role
        if r.rows == 1:
            return said
        # the share its keys hold on average: 'previous token' over three rows once held by one row of the three
        share = f"{r.weight:.0%}, " if r.role in ("previous token", "first token", "current token", AFTER_COPY) else ""
        return said + f"<br>{share}mean of {r.rows} rows"

    return {r.head: name(r) for r in roles}


def look_back_blocks(c: StepContext, roles, newest=None) -> list[Block]:
    """Which head does what at this step (`roles`: head_roles, as the picture labels them), and who looks back at an
    earlier copy of the newest token: the head giving that copy the most weight, and the heads whose newest row
    (`newest`: head_roles of the newest row) reads 'after a copy', which weigh the token that followed it instead."""
    t, layer = c.t, c.layer
    ids = list(c.ids[: t.kv_len])
    pieces = [show_piece(p) for p in c.pieces]
    blocks = []
    if roles:
        blocks.append(Block("text", roles_sentence(roles, pieces, layer, t.pattern_rows), "roles"))
    q = t.kv_len - 1
    earlier = earlier_copies(ids, q)
    if earlier:
        ranked = look_back(t, layer, earlier[-1])
        if ranked:
            head, weight = ranked[0]
            said = (f"The newest query {pieces[q]} appeared before, at position {earlier[-1]}: in layer {layer}, head "
                    f"{head} gives that earlier {pieces[q]} the most weight of any head ({weight:.2f}).")
            after = [r for r in (newest or []) if r.role == AFTER_COPY]
            if after:
                which = ("Head " if len(after) == 1 else "Heads ") + ", ".join(str(r.head) for r in after)
                keys = [f"{p} ({pieces[p]})" for p in after_copies(ids, q)]
                at = ", ".join(keys[:-1]) + " and " + keys[-1] if len(keys) > 1 else keys[0]
                said += (f" {which} ('{AFTER_COPY}') {'looks' if len(after) == 1 else 'look'} instead at the token "
                         f"that followed an earlier {pieces[q]}, at position{'s' if len(keys) > 1 else ''} {at}, "
                         f"with weight{'s' if len(after) > 1 else ''} {', '.join(f'{r.weight:.2f}' for r in after)} "
                         "there.")
            blocks.append(Block("text", said, "look_back"))
    return blocks


def next_token(c: StepContext) -> list[Block]:
    t = c.t
    return [Block("figure", next_token_figure(t, scale=c.scale), "next"),
            Block("text", f"Chosen: {show_piece(t.token)} (id {t.token_id}), {t.rule}.", "chosen"),
            Block("caption", "The last position's output is a score (logit, the numbers on the bars) for every token. "
                             "Softmax turns them into probabilities; the warpers (temperature, top-k, top-p, "
                             "repetition penalty) reshape them; then a rule picks one.")]


def matmuls(c: StepContext) -> list[Block]:
    t, layer = c.t, c.layer
    if c.spec is None:
        return [Block("note", "The model's figures were not shared with this step.")]
    no_cache = t.kv_len if t.phase == "decode" else t.q_len
    with_cache = t.q_len if t.use_cache or t.phase == "prefill" else 1
    return [Block("caption", f"Layer {layer}, step {t.step}: q = the rows fed, {with_cache} with the cache, "
                             f"{no_cache} without."),
            Block("figure", matmul_figure(t, c.spec, layer, scale=c.scale), "matmuls"),
            Block("caption", "FLOPs are estimates (k thousand, M million); × is cache off over on; ④ and ⑤ run once "
                             f"per head ({c.spec.heads} ×). "
                             "The cache removes the projections of old positions (Q, K, V, W_o and the MLP run on the "
                             "fed rows only); ④ QKᵀ and ⑤ ·V still grow with the context (shaded). Scores count the "
                             "(query, key) pairs the mask lets through; eager attention also computes the masked ones "
                             "and throws them away.")]


def shapes(c: StepContext) -> list[Block]:
    t, spec = c.t, c.spec
    blocks = []
    if spec is not None:  # GPT-2's worked example first, whatever the prompt: one click from the step page
        blocks += [Block("md", "**GPT-2 (124M)** on \"A red jacket compliments any outfit.\" (7 "
                               "tokens), beside **this model** on this prompt:"),
                   Block("table", gpt2_shapes_frame(t, spec, c.prompt_len).set_index("tensor"), "gpt2")]
    blocks += [Block("caption", "The tensors of this pass, named by where they live; 'measured' shapes were read off "
                                "the real tensors. At prefill pos is the prompt length s; at a cached decode step it "
                                "is 1."),
               Block("table", shapes_frame(t).set_index("tensor"), "shapes")]
    if spec is not None and spec.kv_heads != spec.heads:
        group = spec.heads // spec.kv_heads
        blocks.append(Block("note", f"{spec.attention}: {spec.heads} query heads share {spec.kv_heads} key/value "
                                    f"head{'s' if spec.kv_heads != 1 else ''} "
                                    f"({group} queries per K/V head), so a kept cache is {group}× smaller than with "
                                    "one K/V head per query head"
                                    + ("." if c.t.use_cache else " (this run keeps none: the cache is off).")))
    return blocks


KV_FORMULA = (r"\begin{aligned}\text{KV bytes}=\sum_{\text{layer}} 2&\times batch\times kv\_head\\"
              r"&\times pos_{\text{kept}}\times head\_dim\\&\times\text{bytes per element}\end{aligned}")


def kv_cache(c: StepContext) -> list[Block]:
    t = c.t
    blocks = [Block("caption", "Per layer, the cache keeps the keys and values of the positions seen so far (a "
                               "sliding-window layer only its window), so a decode step only computes K and V for the "
                               "new position. Bytes are measured from the real tensors."),
              Block("latex", KV_FORMULA)]
    if not t.use_cache:
        return blocks + [Block("warn", "The KV cache is off: nothing is stored between steps (0 bytes), so every "
                                       "decode step recomputes keys and values for all positions.")]
    layers = c.spec.layers if c.spec is not None else len(t.layers)
    return blocks + [Block("table", kv_frame(t).set_index("layer"), "kv_table"),
                     Block("figure", kv_grid_figure(list(c.records), layers, scale=c.scale), "kv_grid"),
                     Block("figure", kv_growth_figure(list(c.records), scale=c.scale), "kv_growth")]


def ms3(x: float) -> str:
    """Milliseconds in at most four characters (106, 10.6, 7.24, 0.38): a metric that fits a third of a side column."""
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}" if x >= 1 else f"{x:.2g}"


def latency(c: StepContext) -> list[Block]:
    traces = list(c.records)
    call = timing_callout(traces)
    note = latency_note(traces)  # a busy server's contradiction, said on the chart and under it
    n = call["prompt_tokens"]
    # three across a side column in presenter mode: short labels (the help says each in full), three figures each
    blocks = [Block("metrics", [("TTFT", f"{ms3(call['ttft_ms'])} ms",
                                 f"Time to first token: the prefill pass (initiation phase) over all {n} prompt tokens, "
                                 "plus choosing its token"),
                                ("TPOT", f"{ms3(call['tpot_ms'])} ms" if call["tpot_ms"] else "—",
                                 "Time per output token: the median decode step (generation phase), one per token"
                                 + (f"; its {call['decode_steps']} steps took {ms3(call['tpot_range_ms'][0])}–"
                                    f"{ms3(call['tpot_range_ms'][1])} ms, each a bar in the chart"
                                    if call["tpot_ms"] else "")),
                                ("prompt token", f"{ms3(call['prefill_ms_per_token'])} ms",
                                 f"What one prompt token cost: TTFT over its {n} tokens (one pass computes them "
                                 "all). Beside TPOT, a token's cost in each phase")], "ttft_tpot"),
              Block("figure", latency_figure(traces, scale=c.scale, note=note), "latency")]
    if note:
        blocks.append(Block("warn", note, "noise"))
    said = ttft_tpot_sentence(call)
    if said:
        blocks.append(Block("caption", said, "ttft_vs_tpot"))
    trend = latency_trend(traces)
    if trend["climbs"] is None:
        what = "Take six or more decode steps to see how their time changes."
    else:  # the factor always, beside the word: "about flat" alone could cover a rise of 18%
        ratio = trend["last_ms"] / trend["first_ms"]
        means = (f"the first three took {trend['first_ms']:.2f} ms on average, the last three {trend['last_ms']:.2f} "
                 f"ms (×{ratio:.2f})")
        if trend["climbs"]:
            what = f"Decode steps climb: {means}."
        elif trend["last_ms"] < trend["first_ms"] / CLIMB:
            what = (f"Decode steps got faster: {means}, though the work did not shrink"
                    + (": the note above says why." if note else ": at this size a step is mostly fixed costs, which "
                       "vary with what else the server does."))
        else:
            what = (f"Decode steps changed by less than ×{CLIMB:g}: {means}. At this length the fixed cost of a pass "
                    "hides most of the growing work" + (" even with the cache off." if not c.t.use_cache else "."))
    repeats = c.t.timing.repeats
    blocks.append(Block("caption", f"Each bar is the median of {repeats} timed runs of the same pass (whisker: fastest "
                                   f"to slowest) and the time to choose its token: the table's latency_ms, where "
                                   f"forward_ms is the pass alone, the time the stage quotes. The run before the "
                                   f"timed ones is a warm-up, excluded. TTFT is the prefill's "
                                   f"bar, TPOT the dotted line. {what} The dashed line is a FLOPs estimate, not a "
                                   "measurement."))
    blocks.append(Block("table", traces_frame(traces)[STEP_COLUMNS], "steps"))
    return blocks


def tokens(c: StepContext) -> list[Block]:
    t = c.t
    known = list(zip(c.ids, c.pieces))[: t.kv_len + 1]
    return [Block("caption", "Text in, tokens out: the tokenizer cut the prompt into pieces (blue), each with an id. "
                             "The model only ever sees the ids. Generated tokens are orange; the ones fed to this "
                             "step's pass are outlined."),
            *([Block("text", said, "bytes")] if (said := split_sentence([p for _, p in known])) else []),
            Block("html", token_chips_html(known[: c.prompt_len], known[c.prompt_len:],
                                               set(range(t.past, t.kv_len))), "tokens"),
            Block("text", c.text, "text")]


def split_sentence(pieces: list[str], most: int = 3) -> str | None:
    """The characters that took several tokens (drawing.characters.split_characters), in one sentence; None if
    every character was one token or more whole characters."""
    split = split_characters(pieces)
    if not split:
        return None
    ch, positions, data = split[0]
    first = (f"'{ch}' is one character, {len(data)} bytes in UTF-8 ({' '.join(f'{b:02X}' for b in data)}); this "
             f"tokenizer has no token for it, so it took {len(positions)} tokens (positions {positions[0]}–"
             f"{positions[-1]}): {' '.join(pieces[p] for p in positions)}.")
    more = [f"'{c}' {len(p)} tokens" for c, p, _ in split[1:most]]
    rest = len(split) - 1 - len(more)
    if more:
        tail = f" and {rest} more character{'s' if rest > 1 else ''}" if rest else ""
        first += " So did " + ", ".join(more) + tail + "."
    return (f"One character, several tokens. {first} A piece between ⟨ ⟩ is bytes, not a whole character: decoded "
            "alone it would be '�'.")


BUILDERS = {"Attention": attention, "Next token": next_token, "Matmuls": matmuls, "Shapes": shapes,
            "KV cache": kv_cache, "Latency": latency, "Tokens": tokens}
