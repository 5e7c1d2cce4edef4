"""``python -m langgraph_memory_plus.cli``: the same as the ``langgraph-memory`` command."""

import sys

from . import main

sys.exit(main())
