"""``python -m udcg.trec`` is ``udcg trec``."""

import sys

from udcg.cli.trec import main

sys.exit(main())
