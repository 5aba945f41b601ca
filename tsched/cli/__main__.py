"""`python -m tsched.cli`: the `tsched` command."""

import sys

from tsched.cli import main

sys.exit(main())
