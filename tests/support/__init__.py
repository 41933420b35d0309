"""Test-only helpers: real S3 servers for the tests (``servers``), an independent checker (``checks``), one task
attempt writing a few files through mpcommit (``jobs``) and Spark on s3a:// (``spark_s3a``)."""
