"""The store: the one package that talks to S3 and makes AWS clients (the only one importing awscrt and botocore;
catalog/glue.py takes its Glue client from :func:`.session.glue_client`)."""

from .s3 import CompletedPart, ObjectInfo, S3Store, UploadInfo, store_for

__all__ = ["CompletedPart", "ObjectInfo", "S3Store", "UploadInfo", "store_for"]
