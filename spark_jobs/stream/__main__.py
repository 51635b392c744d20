"""``python -m spark_jobs.stream``: the stream's command line (spark_jobs/stream/cli.py)."""

import sys

from spark_jobs.stream.cli import main

if __name__ == "__main__":
    sys.exit(main())
