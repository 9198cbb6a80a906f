"""Fixtures of the client tests: a client for the server at $SPIRIT_URL and the Cranfield documents."""
import json
import os
import pathlib

import pytest
from opensearchpy import OpenSearch

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRANFIELD = ROOT.parent / "shared" / "data" / "relevance" / "cranfield" / "docs.jsonl"
SAMPLE = pathlib.Path(__file__).parent / "data" / "cranfield-sample.jsonl"


@pytest.fixture(scope="session")
def client():
    url = os.environ.get("SPIRIT_URL")
    if not url:
        pytest.fail("SPIRIT_URL is not set: start `spirit serve` and point SPIRIT_URL at it (see tests/clients/README.md)")
    headers = {}
    if os.environ.get("SPIRIT_API_KEY"):
        headers["Authorization"] = "ApiKey " + os.environ["SPIRIT_API_KEY"]
    c = OpenSearch(hosts=[url], headers=headers, timeout=120)
    c.info()
    return c


@pytest.fixture(scope="session")
def cranfield():
    path = CRANFIELD if CRANFIELD.exists() else SAMPLE
    docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for d in docs:
        d["n"] = int(d["id"])
    return docs
