"""``python -m udcg.trec`` is ``udcg trec``, with the process settings of the console script
(docs/cli.md, "Process settings")."""

import gc
import sys

from udcg._threads import one_blas_thread

one_blas_thread()  # before numpy is imported

from udcg.cli.trec import main  # noqa: E402

gc.freeze()  # the modules just imported live as long as the process
sys.exit(main())
