"""The ``mpcommit`` command line: list, price and clean pending uploads and stuck jobs, show commits.

Entry point: :func:`mpcommit.cli.main.main` (the ``mpcommit`` console script). Every command is a thin layer
over the library (``mpcommit.operations.uploads``, ``mpcommit.protocol.recovery``, ``mpcommit.operations.lifecycle``): it parses options,
shows progress on stderr, prints tables for people or one JSON document for scripts, and maps errors to exit
codes (0 ok, 1 failure, 2 usage error).
"""
