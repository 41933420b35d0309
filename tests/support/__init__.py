"""Test-only helpers: real S3 servers for the tests (``servers``) and an independent checker (``checks``)."""
