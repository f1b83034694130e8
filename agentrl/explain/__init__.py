"""Explain what the RL math did, token by token (layer 5)."""

from agentrl.explain.arrays import (
    ArraysInput,
    Explanation,
    explain_arrays,
    format_json,
    format_table,
    load_arrays,
)

__all__ = ["ArraysInput", "Explanation", "explain_arrays", "format_json", "format_table", "load_arrays"]
