"""``python -m udcg.trec`` is ``udcg trec``."""

import gc
import sys

from udcg.cli.trec import main

# the modules just imported live as long as the process: garbage collections, the last one
# at exit included, need not walk their objects again
gc.freeze()
sys.exit(main())
