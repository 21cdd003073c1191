"""Calling a differentiable answer and running its backward, in whatever process holds the answer.

The notebook's ``check`` does this in its own process; the grader does it in the notebook's sandbox, where
``kernels.checks`` is a stub, so this module lives outside it and imports nothing but torch (and Triton, to count
the backward's launches). Only the output, the inputs' gradients and a few facts about the autograd graph and the
backward come back: the check judges them elsewhere.
"""

from __future__ import annotations

import torch

__all__ = ["leaves", "call_and_backward", "Launches"]


def leaves(args, requires) -> list:
    """``args`` with those at the indices ``requires`` detached into fresh leaves that require grad."""
    return [a.detach().requires_grad_() if i in requires else a for i, a in enumerate(args)]


class Launches:
    """Counts Triton launches while active: every ``kernel[grid](...)``, compiled or interpreted, autotuned or not,
    goes through ``KernelInterface.__getitem__``, patched here and restored on exit. ``count`` stays None where
    Triton cannot be imported (nothing was counted)."""

    def __enter__(self):
        self.count = None
        try:
            from triton.runtime.jit import KernelInterface
        except Exception:  # noqa: BLE001 (no Triton here: the count says so)
            return self
        self._cls, self._getitem = KernelInterface, KernelInterface.__dict__["__getitem__"]
        getitem = self._getitem

        def counted_getitem(kernel, grid):
            launch = getitem(kernel, grid)

            def counted(*args, **kwargs):
                self.count += 1
                return launch(*args, **kwargs)

            return counted

        self.count = 0
        KernelInterface.__getitem__ = counted_getitem
        return self

    def __exit__(self, *exc):
        if self.count is not None:
            self._cls.__getitem__ = self._getitem
        return False


def _tensors(value, depth: int = 0) -> list:
    """The tensors in ``value``: itself, or inside lists, tuples and dicts (a few levels deep)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth < 3 and isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v, depth + 1)]
    if depth < 3 and isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v, depth + 1)]
    return []


def kept_on_contexts(outputs) -> list:
    """The tensors that custom ``torch.autograd.Function`` nodes behind ``outputs`` keep as attributes of their
    context (``ctx.q = q``): held for the backward as surely as through ``save_for_backward``, but out of the
    sight of ``saved_tensors_hooks``."""
    todo = [x.grad_fn for x in outputs if isinstance(x, torch.Tensor) and x.grad_fn is not None]
    seen, found = set(), []
    while todo and len(seen) < 100_000:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            for value in vars(node).values():
                found += _tensors(value)
        todo += [n for n, _ in node.next_functions]
    return found


def call_and_backward(fn, args, kwargs, requires, grad_output):
    """Call ``fn(*args, **kwargs)`` (``args`` made by :func:`leaves`), say what its output's gradient node is and
    which of the inputs it saved, then run its backward with ``grad_output``: a dict of ``output``, ``grads`` (of
    the inputs at ``requires``), ``grad_fn`` (its node's type name), ``custom`` (a ``torch.autograd.Function``'s
    node), ``saved`` (each tensor it saved or kept on its context: the input's index or None, the shape, and
    where: ``ctx.save_for_backward`` or ``ctx.NAME``; ``copy_of``, an input's index, for a copy of that input),
    ``launches_forward`` and ``launches_backward`` (the Triton launches the call and its backward made; the
    backward's None when it did not run or nothing could count them); or whatever ``fn`` returned, when it is not
    a tensor (the check names what came back instead).
    ``grad_output`` is expanded to the output's shape: one of size 1 along a dimension reaches the backward with
    stride 0 there, as ``o.sum(-1)``'s backward hands it."""
    with torch.enable_grad():
        with Launches() as forward:
            out = fn(*args, **kwargs)
        if not isinstance(out, torch.Tensor):
            return out
        node = out.grad_fn
        custom = isinstance(node, torch.autograd.function.BackwardCFunction)
        saved = []

        def note(t, where):
            if len(saved) >= 64:  # enough to judge; a context holding thousands of tensors is not sent back whole
                return
            same = [i for i in requires if t.data_ptr() == args[i].data_ptr() and t.shape == args[i].shape]
            saved.append({"input": same[0] if same else None, "shape": list(t.shape), "where": where})
            copies = [i for i in requires if not same and t.shape == args[i].shape
                      and torch.equal(t.detach().to(args[i].dtype), args[i].detach())]
            if copies:  # the same values in new memory: .contiguous() of a view, .clone(), .float()
                saved[-1]["copy_of"] = copies[0]

        for t in (node.saved_tensors if custom else ()):
            if t is not None:
                note(t, "ctx.save_for_backward")
        # tensors kept as the context's own attributes (ctx.o = o, ctx.states = [...]) are saved as surely
        for name, value in (vars(node).items() if custom else ()):
            for t in _tensors(value):
                note(t, f"ctx.{name}")
        launches = None
        if custom and all(t["input"] is not None for t in saved):  # else the check refuses it unrun
            with Launches() as counter:
                out.backward(grad_output.expand_as(out))
            launches = counter.count
    return {"__grad_call__": True, "output": out.detach(), "grads": [args[i].grad for i in requires],
            "grad_fn": None if node is None else type(node).__name__, "custom": custom, "saved": saved,
            "launches_forward": forward.count, "launches_backward": launches}
