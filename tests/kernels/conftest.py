import pytest
import torch

from kernels.device import DEVICE
from kernels.testing import poisoned


@pytest.fixture
def allocations(monkeypatch):
    """Float buffers a kernel's wrapper allocates (``torch.empty``) come NaN-filled inside NaN guard bands;
    returns the list of them."""
    made = []
    empty = torch.empty

    def fake_empty(*size, dtype=None, device=None, **kw):
        dt = dtype or torch.get_default_dtype()
        if kw or not dt.is_floating_point:
            return empty(*size, dtype=dtype, device=device, **kw)
        shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else size
        p = poisoned(*shape, dtype=dt, device=device or DEVICE)
        made.append(p)
        return p.out

    monkeypatch.setattr(torch, "empty", fake_empty)
    return made
