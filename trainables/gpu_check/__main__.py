"""``python -m trainables.gpu_check``: see ``trainables.gpu_check`` (and docs/gpu.md)."""

import sys

from trainables.gpu_check.check import main

sys.exit(main())
