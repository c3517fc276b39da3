"""Race: the KV cache on against off, measured (topics/race/)."""

from topics.race.page import show

show()
