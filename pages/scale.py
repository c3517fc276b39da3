"""Scale: the model grown, KV memory, the roofline (topics/ladder/)."""

from topics.ladder.page import show

show()
