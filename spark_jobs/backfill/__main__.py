"""``python -m spark_jobs.backfill``: the backfill job's command line."""

import sys

from spark_jobs.backfill.job import main

sys.exit(main())
