"""Speculative decoding, round by round (topics/speculative/)."""

from topics.speculative.page import show

show()
