import sys

from ..compile import enter_compile_mode

# Compile real kernels even where `import kernels` chose the interpreter: Triton reads TRITON_INTERPRET when a
# function is decorated, and nothing has imported Triton yet at this point.
enter_compile_mode()

from .cli import main  # noqa: E402

sys.exit(main())
