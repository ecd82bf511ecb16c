"""``python -m fedrca.cli``: the ``fedrca`` command."""

import sys

from fedrca.cli import main

sys.exit(main())
