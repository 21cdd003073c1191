"""Lesson 06: read the compiler, profile, autotune.

:mod:`.compiler` compiles a launch for sm_90 without a GPU and reads its stages, registers, spills, shared memory
and memory instructions; :mod:`.planted` holds a matmul with a planted performance bug and its fix;
:mod:`.measure` times and profiles on a GPU (proton, Nsight Compute) and re-measures an autotuner's winner.
Importing this package compiles nothing.
"""
