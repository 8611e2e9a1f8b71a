"""`python3 -m ulysses_post`: the same command line as the `ulysses-post` entry point."""

import sys

from .cli import main

sys.exit(main())
