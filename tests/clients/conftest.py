"""Fixtures of the client tests: a stock opensearch-py client for the server at $SPIRIT_URL, and the Cranfield
documents (../shared/data/relevance/cranfield/docs.jsonl beside the repository, else the 200-document sample
shipped in data/)."""
import json
import os
import pathlib

import pytest
from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import TransportError

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRANFIELD = ROOT.parent / "shared" / "data" / "relevance" / "cranfield" / "docs.jsonl"
SAMPLE = pathlib.Path(__file__).resolve().parent / "data" / "cranfield-sample.jsonl"


def _stop(message):
    # A missing or unreachable server is a broken setup, not a reason to skip: stop the whole session, non-zero.
    pytest.exit(f"tests/clients: {message}", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture(scope="session", autouse=True)
def spirit_url():
    """The server under test. Checked once per session, before the first test (not at --collect-only)."""
    url = os.environ.get("SPIRIT_URL", "").strip()
    if not url:
        _stop(
            "SPIRIT_URL is not set. Start `spirit serve` and run e.g. "
            "SPIRIT_URL=http://127.0.0.1:9200 .venv/bin/python -m pytest tests/clients -q "
            "(see tests/clients/README.md)"
        )
    return url.rstrip("/")


@pytest.fixture(scope="session")
def client(spirit_url):
    headers = {}
    key = os.environ.get("SPIRIT_API_KEY", "")
    if key:
        headers["Authorization"] = f"ApiKey {key}"
    c = OpenSearch(hosts=[spirit_url], headers=headers)
    try:
        c.info()
    except OSConnectionError as e:
        _stop(f"cannot reach spirit at SPIRIT_URL={spirit_url}: {e}")
    except TransportError as e:
        if e.status_code == 401:
            _stop(f"spirit at {spirit_url} wants an API key: set SPIRIT_API_KEY ({e.error})")
        raise
    yield c
    c.close()


def load_cranfield():
    """The Cranfield documents as indexed: {"id", "title", "body"} plus the numeric field n = int(id)."""
    path = CRANFIELD if CRANFIELD.exists() else SAMPLE
    docs = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                d["n"] = int(d["id"])
                docs.append(d)
    assert docs, f"no documents in {path}"
    return docs


@pytest.fixture(scope="session")
def cranfield():
    return load_cranfield()
