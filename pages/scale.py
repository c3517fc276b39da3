"""Scale: the model grown, KV memory, the roofline (topics/ladder/), and bytes are time beside the curve
(topics/bytes/)."""

from topics.bytes.page import section
from topics.ladder.page import show

show(beside_curve=section)
