"""Serving: many requests on one model (topics/serving/)."""

from topics.serving.page import show

show()
