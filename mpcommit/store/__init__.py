"""The store: the one package that talks to S3 (the only one importing awscrt; botocore serves catalog/glue.py too)."""

from .s3 import CompletedPart, ObjectInfo, S3Store, UploadInfo, store_for

__all__ = ["CompletedPart", "ObjectInfo", "S3Store", "UploadInfo", "store_for"]
