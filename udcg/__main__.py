"""``python -m udcg COMMAND`` is the ``udcg`` console script."""

import sys

from udcg.cli.main import main

sys.exit(main())
