"""Causal linear attention as a recurrence: the naive HBM-state loop and the fused register-state loop."""

from .fused import fused_recurrent
from .naive import naive_recurrent
from .prefetch import prefetch_recurrent
from .reference import reference_recurrent, reference_recurrent_loop

__all__ = ["naive_recurrent", "fused_recurrent", "prefetch_recurrent", "reference_recurrent",
           "reference_recurrent_loop"]
