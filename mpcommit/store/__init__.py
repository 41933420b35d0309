"""The store: the one module that talks to S3 (and the only one importing botocore and tenacity)."""

from .s3 import CompletedPart, ObjectInfo, S3Store, UploadInfo, store_for

__all__ = ["CompletedPart", "ObjectInfo", "S3Store", "UploadInfo", "store_for"]
