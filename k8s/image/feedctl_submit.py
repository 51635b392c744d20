"""``feedctl`` as a Python file, for spark-submit: a Spark application's main resource must be a file.

The image copies it to ``/opt/feed/feedctl_submit.py``; k8s/stream-sparkapplication.yaml names it
(``pyFiles: local:///opt/feed/feedctl_submit.py``) and passes ``feedctl``'s arguments as
``driverArgs``. The exit code is feedctl's, so the operator sees a failed stream as a failed driver.
"""

import sys

from feed_service.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
