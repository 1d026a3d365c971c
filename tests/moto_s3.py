"""A local S3-compatible store for the tests: moto's server (PyPI `moto[server]`, the stand-in
DVC's and MLflow's own test suites use), started on a free loopback port and stopped after.
Credentials are dummies and every AWS lookup stays on this machine: no instance-metadata
requests, no ~/.aws files."""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import free_port, server

REGION = "us-east-1"


def offline_aws(folder: Path) -> dict:
    """What keeps botocore local: no metadata endpoint, and config and credential files that do
    not exist (a developer's ~/.aws must not change what the tests see)."""
    return {"AWS_EC2_METADATA_DISABLED": "true", "AWS_DEFAULT_REGION": REGION,
            "AWS_CONFIG_FILE": str(folder / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(folder / "no-aws-credentials")}


@dataclass
class S3:
    endpoint: str
    env: dict  # for a process that talks to the store itself: dummy credentials, offline lookups

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id="test", aws_secret_access_key="test")

    def keys(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Every object under `prefix` -> its size."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return {obj["Key"]: obj["Size"] for page in pages for obj in page.get("Contents", [])}

    def read(self, bucket: str, key: str) -> bytes:
        return self.client().get_object(Bucket=bucket, Key=key)["Body"].read()


@contextlib.contextmanager
def moto_server(folder: Path, buckets: tuple[str, ...] = ()) -> Iterator[S3]:
    """moto's S3 server on 127.0.0.1 with `buckets` created; its log is folder/moto.log."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {**offline_aws(folder), "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with server(cmd, folder, f"{endpoint}/moto-api/", folder / "moto.log", seconds=60, env=env):
        store = S3(endpoint, env)
        for bucket in buckets:
            store.client().create_bucket(Bucket=bucket)
        yield store


def without_aws(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """This process gets no AWS credentials and no S3 endpoint: whatever reaches the store must
    go through the tracking server (proxied artifacts), or fail for want of credentials."""
    for var in list(os.environ):
        if var.startswith("AWS_") or var == "MLFLOW_S3_ENDPOINT_URL":
            monkeypatch.delenv(var)
    for var, value in offline_aws(folder).items():
        monkeypatch.setenv(var, value)
