"""The exercise spec's helpers (kernels/checks/spec.py)."""

import pytest

from kernels.checks.spec import settings_problem


@pytest.mark.parametrize("value, words", [
    (dict(BT=64, BV=32), None),
    ([64, 32], "CHUNK must be a dict with keys BT, BV; got a list"),
    (dict(BT=64), "missing ['BV']"),
    (dict(BT=64, BV=32, BK=16), "unknown ['BK']"),
    (dict(BT=True, BV=32), "BT=True must be a positive integer"),
    (dict(BT=64, BV=0), "BV=0 must be a positive integer"),
    (dict(BT=64.0, BV=32), "BT=64.0 must be a positive integer"),
])
def test_settings_problem_names_the_first_fault(value, words):
    why = settings_problem("CHUNK", value, ("BT", "BV"))
    assert why is None if words is None else words in why, why
