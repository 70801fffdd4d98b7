"""`python -m ggspec` is the `ggspec` command."""

import sys

from ggspec.cli import main

sys.exit(main())
