"""The main job (`mpcommit demo`) and the embedded S3 server it runs on (moto's, in this process)."""
