"""``python -m udcg`` is ``python -m udcg.trec``."""

import sys

from udcg.trec import main

sys.exit(main())
