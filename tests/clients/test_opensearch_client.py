"""spirit driven by the stock opensearch-py client, as an Elasticsearch/OpenSearch user would."""
import re

import pytest
from opensearchpy import helpers
from opensearchpy.exceptions import NotFoundError, RequestError

INDEX = "cranfield-client-test"


def words(text):
    return re.findall(r"\w+", text.lower())


@pytest.fixture(scope="module")
def loaded(client, cranfield):
    if client.indices.exists(index=INDEX):
        client.indices.delete(index=INDEX)
    assert not client.indices.exists(index=INDEX)
    body = {
        "settings": {"number_of_shards": 1, "index": {"translog": {"durability": "request"}}},
        "mappings": {"properties": {
            "title": {"type": "text"},
            "body": {"type": "text", "analyzer": "english"},
            "n": {"type": "long"},
            "id": {"type": "keyword"},
        }},
    }
    r = client.indices.create(index=INDEX, body=body)
    assert r["acknowledged"] is True
    assert client.indices.exists(index=INDEX)
    actions = ({"_index": INDEX, "_id": d["id"], "_source": d} for d in cranfield)
    ok, errors = helpers.bulk(client, actions, chunk_size=250)
    assert errors == [] and ok == len(cranfield)
    # Visible at once: no refresh before counting.
    assert client.count(index=INDEX)["count"] == len(cranfield)
    yield cranfield
    client.indices.delete(index=INDEX)
    assert not client.indices.exists(index=INDEX)


def test_info(client):
    info = client.info()
    assert info["version"]["number"]
    assert info["tagline"] == "You Know, for Search"


def test_create_twice_is_an_error(client, loaded):
    with pytest.raises(RequestError) as e:
        client.indices.create(index=INDEX)
    assert e.value.status_code == 400
    assert e.value.error == "resource_already_exists_exception"
    assert client.indices.refresh(index=INDEX)["_shards"]["failed"] == 0


def hits(r):
    return r["hits"]["hits"]


def test_match_or_and(client, loaded):
    r = client.search(index=INDEX, body={"query": {"match": {"body": "boundary layer"}}, "size": 50})
    hs = hits(r)
    assert hs and r["hits"]["total"]["value"] >= len(hs)
    for h in hs:
        ws = words(h["_source"]["body"])
        assert any(w.startswith("boundar") or w.startswith("layer") for w in ws), h["_id"]
    scores = [h["_score"] for h in hs]
    assert scores == sorted(scores, reverse=True)
    r2 = client.search(index=INDEX, body={"query": {"match": {"body": {"query": "boundary layer", "operator": "and"}}}, "size": 50})
    for h in hits(r2):
        ws = words(h["_source"]["body"])
        assert any(w.startswith("boundar") for w in ws) and any(w.startswith("layer") for w in ws)
    assert r2["hits"]["total"]["value"] <= r["hits"]["total"]["value"]


def test_match_phrase(client, loaded):
    r = client.search(index=INDEX, body={"query": {"match_phrase": {"body": "boundary layer"}}, "size": 100})
    assert hits(r)
    for h in hits(r):
        assert re.search(r"boundary[- ]+layers?", h["_source"]["body"].lower()), h["_id"]


def test_bool_with_filter_range(client, loaded):
    q = {"bool": {
        "must": [{"match": {"body": "flow"}}],
        "must_not": [{"match": {"body": "supersonic"}}],
        "filter": [{"range": {"n": {"gte": 100, "lte": 500}}}],
    }}
    r = client.search(index=INDEX, body={"query": q, "size": 100})
    assert hits(r)
    for h in hits(r):
        s = h["_source"]
        assert 100 <= s["n"] <= 500
        assert "flow" in words(s["body"]) or "flows" in words(s["body"])
        assert "supersonic" not in words(s["body"])


def test_range_term_terms_prefix_match_all(client, loaded):
    expected = sum(1 for d in loaded if 10 <= d["n"] < 60)
    r = client.count(index=INDEX, body={"query": {"range": {"n": {"gte": 10, "lt": 60}}}})
    assert r["count"] == expected
    r = client.search(index=INDEX, body={"query": {"term": {"id": "42"}}})
    assert [h["_id"] for h in hits(r)] == ["42"]
    r = client.search(index=INDEX, body={"query": {"terms": {"id": ["1", "2", "3"]}}})
    assert sorted(h["_id"] for h in hits(r)) == ["1", "2", "3"]
    r = client.search(index=INDEX, body={"query": {"prefix": {"body": "aerodyn"}}, "size": 20})
    assert hits(r)
    for h in hits(r):
        assert any(w.startswith("aerodyn") for w in words(h["_source"]["body"]))
    assert client.count(index=INDEX, body={"query": {"match_all": {}}})["count"] == len(loaded)


def test_paging_source_filtering_totals_highlight(client, loaded):
    q = {"match": {"body": "heat transfer"}}
    ten = hits(client.search(index=INDEX, body={"query": q, "size": 10}))
    page2 = hits(client.search(index=INDEX, body={"query": q, "size": 5, "from": 5}))
    assert [h["_id"] for h in page2] == [h["_id"] for h in ten[5:10]]
    r = client.search(index=INDEX, body={"query": q, "_source": ["title"]})
    assert all(set(h["_source"]) == {"title"} for h in hits(r))
    r = client.search(index=INDEX, body={"query": q, "_source": False})
    assert all("_source" not in h for h in hits(r))
    r = client.search(index=INDEX, body={"query": q, "sort": [{"n": {"order": "desc"}}], "size": 20})
    ns = [h["_source"]["n"] for h in hits(r)]
    assert ns == sorted(ns, reverse=True) and [h["sort"][0] for h in hits(r)] == ns
    r = client.search(index=INDEX, body={"query": q, "track_total_hits": False})
    assert "total" not in r["hits"]
    r = client.search(index=INDEX, body={"query": q, "highlight": {"fields": {"body": {}}, "pre_tags": ["<em>"], "post_tags": ["</em>"]}})
    assert hits(r)
    for h in hits(r):
        frags = h["highlight"]["body"]
        assert frags and all("<em>" in f for f in frags)


def test_real_time_visibility(client, loaded):
    for i in range(50):
        word = f"zyxrealtime{i}q"
        r = client.index(index=INDEX, id=f"rt{i}", body={"title": f"real time {word}", "body": "fresh", "n": 100000 + i})
        assert r["result"] == "created"
        found = client.search(index=INDEX, body={"query": {"match": {"title": word}}})
        assert [h["_id"] for h in hits(found)] == [f"rt{i}"]
        assert client.get(index=INDEX, id=f"rt{i}")["_source"]["n"] == 100000 + i


def test_get_update_delete(client, loaded):
    doc = client.get(index=INDEX, id="7")
    assert doc["found"] and doc["_source"] == next(d for d in loaded if d["id"] == "7")
    with pytest.raises(NotFoundError):
        client.get(index=INDEX, id="no-such-id")
    assert client.exists(index=INDEX, id="7")
    assert not client.exists(index=INDEX, id="no-such-id")
    r = client.update(index=INDEX, id="7", body={"doc": {"title": "quixoticallychanged title"}})
    assert r["result"] == "updated"
    after = client.get(index=INDEX, id="7")["_source"]
    assert after["title"] == "quixoticallychanged title"
    assert after["body"] == doc["_source"]["body"]
    found = client.search(index=INDEX, body={"query": {"match": {"title": "quixoticallychanged"}}})
    assert [h["_id"] for h in hits(found)] == ["7"]
    assert client.delete(index=INDEX, id="7")["result"] == "deleted"
    with pytest.raises(NotFoundError):
        client.get(index=INDEX, id="7")
    assert hits(client.search(index=INDEX, body={"query": {"match": {"title": "quixoticallychanged"}}})) == []
    with pytest.raises(NotFoundError):
        client.delete(index=INDEX, id="7")


def test_cat_indices(client, loaded):
    rows = client.cat.indices(format="json")
    row = next(r for r in rows if r["index"] == INDEX)
    assert int(row["docs.count"]) == client.count(index=INDEX)["count"]


def test_errors(client, loaded):
    with pytest.raises(RequestError) as e:
        client.search(index=INDEX, body={"query": {"no_such_query": {}}})
    assert e.value.status_code == 400
    with pytest.raises(NotFoundError) as e:
        client.search(index="no-such-index", body={"query": {"match_all": {}}})
    assert e.value.error == "index_not_found_exception"
