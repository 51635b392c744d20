"""``python -m feed_service ...`` is the same as ``feedctl ...``."""

from feed_service.cli.main import main

raise SystemExit(main())
