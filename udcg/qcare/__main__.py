"""``python -m udcg.qcare`` is ``udcg qcare``."""

import sys

from udcg.cli.qcare import main

sys.exit(main())
