"""Scale: the model grown, KV memory, the roofline (topics/ladder/), and bytes are time beside the curve
(topics/bytes/). Topics never import each other: this door hands the bytes section the curve's recorded decode step
and prefills (topics.ladder.store.curve_step), so it can say where the two recordings timed the same passes apart."""

from topics.bytes.page import section
from topics.ladder.page import show
from topics.ladder.store import curve_step

show(beside_curve=lambda lm: section(lm, curve_step=curve_step("cpu")))
