"""Chunked causal linear attention: the oracle, the ladder of versions and fla's public entry point.

Every version has one signature, ``<version>_linear_attention(q, k, v, scale, initial_state=None,
output_final_state=False, cu_seqlens=None) -> (o, final_state_or_None)``, unnormalised, and is listed in
:data:`VERSIONS`. A version that handles only some cases carries ``supports(q, k, v, initial_state=None,
cu_seqlens=None) -> str | None`` (None: it handles the call; otherwise why not). :func:`chunk_linear_attn` is a
drop-in for fla-core 0.6.0's ``fla.ops.linear_attn.chunk_linear_attn``.
"""

from __future__ import annotations

import pathlib

from .chunked import chunked_linear_attention
from .reference import reference_linear_attention

__all__ = ["VERSIONS", "chunk_linear_attn", "chunked_linear_attention", "reference_linear_attention"]

#: Every version, fastest first.
VERSIONS: dict = {"chunked": chunked_linear_attention}

if (pathlib.Path(__file__).parent / "lookback.py").exists():
    from .lookback import lookback_linear_attention

    VERSIONS = {"lookback": lookback_linear_attention, **VERSIONS}
    __all__ += ["lookback_linear_attention"]
