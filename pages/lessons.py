"""Lessons: the ideas in order, each with the live model (lessons/)."""

from lessons.page import show

show()
