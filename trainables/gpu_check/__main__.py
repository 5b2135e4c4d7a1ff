"""``python -m trainables.gpu_check``: see ``trainables.gpu_check`` (and docs/gpu.md)."""

import sys

from trainables.gpu_check.check import main

if __name__ == "__main__":  # importing it (tests/test_docs_commands.py parses the docs' commands) runs nothing
    sys.exit(main())
