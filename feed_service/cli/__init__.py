"""``feedctl``, the command line: one module per subcommand under :mod:`feed_service.cli.commands`."""
