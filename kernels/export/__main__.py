import os
import sys

# Compile real kernels even where `import kernels` chose the interpreter: Triton reads TRITON_INTERPRET when a
# function is decorated, and nothing has imported Triton yet at this point.
if "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "0"

from .cli import main  # noqa: E402

sys.exit(main())
