"""The KV cache on a budget: quantized or evicted, the damage measured (topics/budget/)."""

from topics.budget.page import show

show()
