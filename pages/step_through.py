"""Step through: prefill once, then one click per token (step/)."""

from step.page import show

show()
