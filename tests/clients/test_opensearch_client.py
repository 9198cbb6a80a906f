"""spirit driven by the stock opensearch-py client, as an Elasticsearch/OpenSearch user would drive it.

One index per module (unique name), created with settings and mappings, bulk-loaded with the Cranfield
collection and checked WITHOUT any refresh: spirit makes every acknowledged write visible at once. The tests
share that index; `Loaded.docs` tracks the live documents (tests that add or delete update it), so each test
computes its expectations from the data rather than from the order the tests run in. The last test deletes
the index.
"""
import re
import uuid

import pytest
from opensearchpy import helpers
from opensearchpy.exceptions import ConflictError, NotFoundError, RequestError

INDEX = f"cranfield-client-{uuid.uuid4().hex[:10]}"

SETTINGS = {"number_of_shards": 1, "index": {"translog": {"durability": "request"}}}
MAPPINGS = {
    "properties": {
        "title": {"type": "text"},
        "body": {"type": "text", "analyzer": "english"},
        "n": {"type": "long"},
        # The documents carry their id as a field too; mapped as keyword for the term/terms tests.
        "id": {"type": "keyword"},
    }
}


def words(text):
    """The tokens of the standard analyzer: lowercased alphanumeric runs."""
    return re.findall(r"[a-z0-9]+", text.lower())


def has_word(text, prefix):
    """True when some word of text starts with prefix: the english analyzer stems ("layers", "layered" and
    "layering" are all "layer"), so a match on a stem shows as a word starting with it."""
    return any(w.startswith(prefix) for w in words(text))


def hits(r):
    return r["hits"]["hits"]


def ids(r):
    return [h["_id"] for h in hits(r)]


class Loaded:
    """What the module fixture did, and the live documents of the index by id."""

    def __init__(self):
        self.exists_before = None
        self.create = None
        self.exists_after = None
        self.bulk = None
        self.count_after_bulk = None
        self.docs = {}


@pytest.fixture(scope="module")
def ix(client, cranfield):
    st = Loaded()
    st.exists_before = client.indices.exists(index=INDEX)
    st.create = client.indices.create(index=INDEX, body={"settings": SETTINGS, "mappings": MAPPINGS})
    st.exists_after = client.indices.exists(index=INDEX)
    actions = ({"_index": INDEX, "_id": d["id"], "_source": d} for d in cranfield)
    # raise_on_error=False: per-item errors come back in the list (and are asserted on) instead of raising.
    st.bulk = helpers.bulk(client, actions, chunk_size=200, raise_on_error=False)
    # Immediately after the last bulk request returns: no refresh in between.
    st.count_after_bulk = client.count(index=INDEX)["count"]
    st.docs = {d["id"]: dict(d) for d in cranfield}
    yield st
    if client.indices.exists(index=INDEX):
        client.indices.delete(index=INDEX)


def test_info(client):
    info = client.info()
    assert isinstance(info["version"]["number"], str) and info["version"]["number"]
    assert info["tagline"] == "You Know, for Search"


def test_create_index(client, ix):
    assert ix.exists_before is False
    assert ix.create["acknowledged"] is True
    assert ix.create["index"] == INDEX
    assert ix.exists_after is True
    assert client.indices.exists(index=INDEX) is True


def test_create_existing_index_is_400(client, ix):
    with pytest.raises(RequestError) as e:
        client.indices.create(index=INDEX, body={"settings": SETTINGS, "mappings": MAPPINGS})
    assert e.value.status_code == 400
    assert e.value.error == "resource_already_exists_exception"
    err = e.value.info
    assert err["status"] == 400
    assert err["error"]["type"] == "resource_already_exists_exception"
    assert err["error"]["reason"]
    assert err["error"]["root_cause"] and err["error"]["root_cause"][0]["type"] == "resource_already_exists_exception"


def test_bulk_visible_without_refresh(client, ix, cranfield):
    ok, errors = ix.bulk
    assert errors == [], errors[:3]
    assert ok == len(cranfield)
    # The count taken right after helpers.bulk returned, with no refresh: every document already visible.
    assert ix.count_after_bulk == len(cranfield)
    # refresh is accepted (a no-op in spirit) and reports no failed shard.
    r = client.indices.refresh(index=INDEX)
    assert r["_shards"]["failed"] == 0
    assert client.count(index=INDEX)["count"] == len(ix.docs)


def test_match(client, ix):
    r = client.search(index=INDEX, body={"query": {"match": {"body": "boundary layer"}}, "size": 50})
    hs = hits(r)
    assert hs
    assert r["hits"]["total"]["value"] >= len(hs)
    assert r["hits"]["total"]["relation"] in ("eq", "gte")
    for h in hs:
        body = h["_source"]["body"]
        assert has_word(body, "boundar") or has_word(body, "layer"), (h["_id"], body[:200])
        assert isinstance(h["_score"], float) and h["_score"] > 0
    scores = [h["_score"] for h in hs]
    assert scores == sorted(scores, reverse=True)
    assert r["hits"]["max_score"] == scores[0]

    q_and = {"match": {"body": {"query": "boundary layer", "operator": "and"}}}
    r2 = client.search(index=INDEX, body={"query": q_and, "size": 50})
    assert hits(r2)
    for h in hits(r2):
        body = h["_source"]["body"]
        assert has_word(body, "boundar") and has_word(body, "layer"), (h["_id"], body[:200])
    assert r2["hits"]["total"]["value"] <= r["hits"]["total"]["value"]


def test_match_phrase(client, ix):
    r = client.search(index=INDEX, body={"query": {"match_phrase": {"body": "boundary layer"}}, "size": 100})
    assert hits(r)
    for h in hits(r):
        # Adjacent words (punctuation is no token); stemming allows "boundary layers", "boundaries layer", ...
        assert re.search(r"\bboundar[a-z]*[^a-z0-9]+layer", h["_source"]["body"].lower()), h["_id"]


def test_match_phrase_slop(client, ix):
    def ids(text, slop):
        body = {"query": {"match_phrase": {"body": {"query": text, "slop": slop}}}, "size": 1000}
        return {h["_id"] for h in hits(client.search(index=INDEX, body=body))}

    # Two swapped words are two moves apart: "layer boundary"~2 finds every "boundary layer" too.
    swapped, near, exact = ids("layer boundary", 0), ids("layer boundary", 2), ids("boundary layer", 0)
    assert exact and swapped | exact <= near and swapped < near
    assert not exact <= ids("layer boundary", 1)
    r = client.search(index=INDEX, body={"query": {"query_string": {"query": 'body:"layer boundary"~2'}}, "size": 1000})
    assert {h["_id"] for h in hits(r)} == near


def test_bool_must_must_not_filter_should(client, ix):
    q = {
        "bool": {
            "must": [{"match": {"body": "flow"}}],
            "must_not": [{"match": {"body": "supersonic"}}],
            "filter": [{"range": {"n": {"gte": 100, "lte": 500}}}],
            "should": [{"match": {"title": "pressure"}}],
        }
    }
    r = client.search(index=INDEX, body={"query": q, "size": 100})
    assert hits(r)
    for h in hits(r):
        s = h["_source"]
        assert 100 <= s["n"] <= 500, h["_id"]
        assert has_word(s["body"], "flow"), h["_id"]
        assert "supersonic" not in words(s["body"]), h["_id"]
    # should only adds score: the same documents match with and without it.
    q_no_should = {"bool": {k: v for k, v in q["bool"].items() if k != "should"}}
    assert client.count(index=INDEX, body={"query": q})["count"] == client.count(
        index=INDEX, body={"query": q_no_should}
    )["count"]
    # ... and a should-only bool requires at least one should clause to match.
    r = client.search(index=INDEX, body={"query": {"bool": {"should": [{"match": {"title": "pressure"}}]}}, "size": 50})
    assert hits(r)
    for h in hits(r):
        assert "pressure" in words(h["_source"]["title"]), h["_id"]


def test_range_term_terms_prefix_match_all(client, ix):
    expected = sum(1 for d in ix.docs.values() if 10 <= d["n"] < 60)
    assert expected > 0
    assert client.count(index=INDEX, body={"query": {"range": {"n": {"gte": 10, "lt": 60}}}})["count"] == expected
    r = client.search(index=INDEX, body={"query": {"range": {"n": {"gte": 10, "lt": 60}}}, "size": 100})
    assert sorted(int(i) for i in ids(r)) == sorted(d["n"] for d in ix.docs.values() if 10 <= d["n"] < 60)

    # term on a keyword field is exact: "4" matches the document 4 only, not 42 or 400.
    assert ids(client.search(index=INDEX, body={"query": {"term": {"id": "42"}}})) == ["42"]
    assert ids(client.search(index=INDEX, body={"query": {"term": {"id": "4"}}})) == ["4"]
    assert ids(client.search(index=INDEX, body={"query": {"term": {"id": "no-such-id"}}})) == []
    r = client.search(index=INDEX, body={"query": {"terms": {"id": ["1", "2", "3", "no-such-id"]}}})
    assert sorted(ids(r)) == ["1", "2", "3"]

    r = client.search(index=INDEX, body={"query": {"prefix": {"body": "aerodyn"}}, "size": 50})
    assert hits(r)
    for h in hits(r):
        assert has_word(h["_source"]["body"], "aerodyn"), h["_id"]

    total = len(ix.docs)
    assert client.count(index=INDEX, body={"query": {"match_all": {}}})["count"] == total
    r = client.search(index=INDEX, body={"query": {"match_all": {}}, "size": 10})
    assert r["hits"]["total"]["value"] == min(total, 10_000) and len(hits(r)) == min(total, 10)


def test_sort_paging_source_filtering(client, ix):
    q = {"match": {"body": "heat transfer"}}
    ten = client.search(index=INDEX, body={"query": q, "size": 10})
    assert len(hits(ten)) == 10
    # Sorting by score, descending, explicitly: the same order as the default.
    by_score = client.search(index=INDEX, body={"query": q, "size": 10, "sort": [{"_score": {"order": "desc"}}]})
    assert ids(by_score) == ids(ten)
    scores = [h["_score"] for h in hits(by_score)]
    assert scores == sorted(scores, reverse=True)
    # from/size: page 2 of size 5 is hits 5..10 of size 10.
    page2 = client.search(index=INDEX, body={"query": q, "size": 5, "from": 5})
    assert ids(page2) == ids(ten)[5:10]
    # Sorting by a numeric field.
    r = client.search(index=INDEX, body={"query": q, "sort": [{"n": {"order": "desc"}}], "size": 20})
    ns = [h["_source"]["n"] for h in hits(r)]
    assert ns and ns == sorted(ns, reverse=True)
    # _source filtering.
    r = client.search(index=INDEX, body={"query": q, "_source": ["title"]})
    assert hits(r)
    for h in hits(r):
        assert set(h["_source"]) == {"title"}
        assert h["_source"]["title"] == ix.docs[h["_id"]]["title"]
    r = client.search(index=INDEX, body={"query": q, "_source": False})
    assert hits(r)
    assert all("_source" not in h for h in hits(r))


def test_track_total_hits_false(client, ix):
    r = client.search(index=INDEX, body={"query": {"match": {"body": "heat transfer"}}, "track_total_hits": False})
    assert hits(r)
    assert r["hits"].get("total") is None


def test_highlight(client, ix):
    body = {
        "query": {"match": {"body": "heat transfer"}},
        "highlight": {"pre_tags": ["<em>"], "post_tags": ["</em>"], "fields": {"body": {}}},
    }
    r = client.search(index=INDEX, body=body)
    assert hits(r)
    for h in hits(r):
        frags = h["highlight"]["body"]
        assert frags, h["_id"]
        for f in frags:
            assert "<em>" in f and "</em>" in f, (h["_id"], f)
            marked = re.findall(r"<em>(.*?)</em>", f)
            assert marked and all(m.lower().startswith(("heat", "transfer")) for m in marked), (h["_id"], f)


def test_count_with_query(client, ix):
    q = {"match": {"body": {"query": "boundary layer", "operator": "and"}}}
    c = client.count(index=INDEX, body={"query": q})["count"]
    r = client.search(index=INDEX, body={"query": q, "size": 0, "track_total_hits": True})
    assert c > 0
    assert c == r["hits"]["total"]["value"]
    assert r["hits"]["total"]["relation"] == "eq"


def test_boost_and_minimum_should_match(client, ix):
    """A boost multiplies a clause's score; minimum_should_match keeps documents matching that many clauses."""
    q = {"match": {"body": "boundary"}}
    plain = client.search(index=INDEX, body={"query": q, "size": 20})
    boosted = client.search(index=INDEX, body={"query": {"match": {"body": {"query": "boundary", "boost": 3}}}, "size": 20})
    assert ids(plain) == ids(boosted) and ids(plain)
    for a, b in zip(hits(plain), hits(boosted)):
        assert abs(b["_score"] - 3 * a["_score"]) < 1e-4 * b["_score"]
    words3 = ["boundary", "layer", "pressure"]
    msm = {"bool": {"should": [{"match": {"body": w}} for w in words3], "minimum_should_match": 2}}
    r = client.search(index=INDEX, body={"query": msm, "size": 200})
    assert hits(r)
    for h in hits(r):
        assert sum(has_word(h["_source"]["body"], w[:6]) for w in words3) >= 2, h["_id"]


def test_mget_and_msearch(client, ix):
    some = sorted(ix.docs)[:3]
    r = client.mget(index=INDEX, body={"ids": some + ["no-such-id"]})
    assert [d["found"] for d in r["docs"]] == [True, True, True, False]
    assert [d["_source"] for d in r["docs"][:3]] == [ix.docs[i] for i in some]
    r = client.msearch(body=[{"index": INDEX}, {"query": {"match": {"body": "boundary"}}, "size": 3},
                             {"index": INDEX}, {"query": {"term": {"id": some[0]}}}])
    assert [x["status"] for x in r["responses"]] == [200, 200]
    assert len(hits(r["responses"][0])) == 3
    assert ids(r["responses"][1]) == [some[0]]


def test_aggregations(client, ix):
    """Metric and bucket aggregations over the live documents, computed here from the data: stats of n, a
    histogram of n, and terms of the keyword id under a query (each id is its own bucket)."""
    ns = [d["n"] for d in ix.docs.values() if "n" in d]
    body = {
        "size": 0,
        "aggs": {
            "n": {"stats": {"field": "n"}},
            "median": {"percentiles": {"field": "n", "percents": [50]}},
            "hundreds": {"histogram": {"field": "n", "interval": 100, "min_doc_count": 1}},
            "boundary": {"filter": {"match": {"body": "boundary"}}, "aggs": {"ids": {"terms": {"field": "id", "size": 5}}}},
        },
    }
    r = client.search(index=INDEX, body=body)
    a = r["aggregations"]
    assert a["n"]["count"] == len(ns) and a["n"]["min"] == min(ns) and a["n"]["max"] == max(ns)
    assert a["n"]["sum"] == sum(ns)
    # Exact: linear between the two values around rank (len - 1) / 2.
    srt = sorted(ns)
    mid = (len(srt) - 1) / 2
    lo, hi = srt[int(mid)], srt[min(int(mid) + 1, len(srt) - 1)]
    assert abs(a["median"]["values"]["50.0"] - (lo + (hi - lo) * (mid - int(mid)))) < 1e-9
    want = {}
    for n in ns:
        want[float(n // 100 * 100)] = want.get(float(n // 100 * 100), 0) + 1
    assert {b["key"]: b["doc_count"] for b in a["hundreds"]["buckets"]} == want
    found = client.search(index=INDEX, body={"query": {"match": {"body": "boundary"}}, "size": 5000, "_source": False})
    matching = ids(found)
    assert a["boundary"]["doc_count"] == len(matching) == found["hits"]["total"]["value"] > 5
    ids_buckets = a["boundary"]["ids"]["buckets"]
    assert [b["key"] for b in ids_buckets] == sorted(matching)[:5]
    assert all(b["doc_count"] == 1 for b in ids_buckets)
    assert a["boundary"]["ids"]["sum_other_doc_count"] == len(matching) - 5


def test_delete_by_query(client, ix):
    """delete_by_query removes what its query matches, visibly to the very next request."""
    for i in range(5):
        doc = {"id": f"dbq{i}", "title": "zqxdeletebyquery", "body": "to be deleted by query", "n": 200_000 + i}
        client.index(index=INDEX, id=doc["id"], body=doc)
    q = {"match": {"title": "zqxdeletebyquery"}}
    assert client.count(index=INDEX, body={"query": q})["count"] == 5
    r = client.delete_by_query(index=INDEX, body={"query": q})
    assert r["deleted"] == 5 and r["version_conflicts"] == 0 and r["failures"] == []
    assert client.count(index=INDEX, body={"query": q})["count"] == 0
    assert client.count(index=INDEX)["count"] == len(ix.docs)


def test_real_time_visibility(client, ix):
    for i in range(50):
        doc_id = f"rt{i}"
        word = f"zqxrealtime{i}v"
        doc = {"id": doc_id, "title": f"real time {word}", "body": "a document that must be visible at once", "n": 100_000 + i}
        r = client.index(index=INDEX, id=doc_id, body=doc)
        assert r["result"] == "created", r
        ix.docs[doc_id] = doc
        # The very next requests see it: no refresh.
        assert ids(client.search(index=INDEX, body={"query": {"match": {"title": word}}})) == [doc_id], i
        got = client.get(index=INDEX, id=doc_id)
        assert got["found"] is True and got["_source"] == doc, i
    assert client.count(index=INDEX)["count"] == len(ix.docs)


def test_get_exists_update_delete(client, ix):
    doc_id = "7"
    original = dict(ix.docs[doc_id])
    got = client.get(index=INDEX, id=doc_id)
    assert got["found"] is True and got["_id"] == doc_id and got["_index"] == INDEX
    assert got["_source"] == original
    with pytest.raises(NotFoundError) as e:
        client.get(index=INDEX, id="no-such-id")
    assert e.value.status_code == 404
    assert client.exists(index=INDEX, id=doc_id) is True
    assert client.exists(index=INDEX, id="no-such-id") is False

    new_title = "quixoticallychanged title"
    r = client.update(index=INDEX, id=doc_id, body={"doc": {"title": new_title}})
    assert r["result"] == "updated"
    after = client.get(index=INDEX, id=doc_id)["_source"]
    assert after == {**original, "title": new_title}
    ix.docs[doc_id] = after
    assert ids(client.search(index=INDEX, body={"query": {"match": {"title": "quixoticallychanged"}}})) == [doc_id]

    r = client.delete(index=INDEX, id=doc_id)
    assert r["result"] == "deleted"
    del ix.docs[doc_id]
    with pytest.raises(NotFoundError):
        client.get(index=INDEX, id=doc_id)
    assert client.exists(index=INDEX, id=doc_id) is False
    assert ids(client.search(index=INDEX, body={"query": {"match": {"title": "quixoticallychanged"}}})) == []
    assert ids(client.search(index=INDEX, body={"query": {"term": {"id": doc_id}}})) == []
    with pytest.raises(NotFoundError):
        client.delete(index=INDEX, id=doc_id)
    assert client.count(index=INDEX)["count"] == len(ix.docs)


def test_sort_by_several_keys_with_search_after(client, ix):
    # Deep paging as clients do it: a sort whose last key is unique, each page after the previous one's last.
    sort = [{"n": {"order": "desc", "missing": "_last"}}, {"_doc": "asc"}]
    seen, after = [], None
    while True:
        body = {"query": {"match_all": {}}, "size": 100, "sort": sort}
        if after is not None:
            body["search_after"] = after
        r = client.search(index=INDEX, body=body)
        page = r["hits"]["hits"]
        if not page:
            break
        assert r["hits"]["total"]["value"] == len(ix.docs)
        seen.extend(page)
        after = page[-1]["sort"]
    assert sorted(h["_id"] for h in seen) == sorted(ix.docs)
    ns = [h["_source"].get("n") for h in seen]
    present = [n for n in ns if n is not None]
    assert present == sorted(present, reverse=True)
    assert all(n is None for n in ns[len(present):]), "missing values last"
    assert all(h["sort"][0] == h["_source"].get("n") for h in seen)
    # A keyword field (the documents' own id), in byte order.
    r = client.search(index=INDEX, body={"query": {"match_all": {}}, "size": 25, "sort": [{"id": "asc"}]})
    assert [h["sort"][0] for h in r["hits"]["hits"]] == sorted(d["id"] for d in ix.docs.values())[:25]


def test_scroll_and_scan(client, ix):
    # helpers.scan: the scroll API sorted by _doc, pages of 37, the scroll cleared at the end.
    q = {"query": {"match": {"body": "flow"}}}
    want = set(ids(client.search(index=INDEX, body={**q, "size": 2000})))
    assert len(want) > 100
    got = [h["_id"] for h in helpers.scan(client, index=INDEX, query=q, size=37, scroll="1m")]
    assert len(got) == len(set(got))
    assert set(got) == want
    # preserve_order: by score, best first across pages.
    scored = list(helpers.scan(client, index=INDEX, query=q, size=25, scroll="1m", preserve_order=True))
    assert {h["_id"] for h in scored} == want
    scores = [h["_score"] for h in scored]
    assert scores == sorted(scores, reverse=True)
    # The raw API: every document once, the total of the first page on every page, then clear_scroll.
    r = client.search(index=INDEX, body={"query": {"match_all": {}}, "sort": ["_doc"]}, scroll="30s", size=100)
    total, seen = r["hits"]["total"]["value"], ids(r)
    while hits(r):
        r = client.scroll(scroll_id=r["_scroll_id"], scroll="30s")
        assert r["hits"]["total"]["value"] == total
        seen += ids(r)
    assert total == len(ix.docs) and sorted(seen) == sorted(ix.docs)
    assert client.clear_scroll(scroll_id=r["_scroll_id"])["num_freed"] == 1
    with pytest.raises(NotFoundError):
        client.scroll(scroll_id=r["_scroll_id"], scroll="30s")


def test_point_in_time(client, ix):
    # OpenSearch's point-in-time API: create_pit, searches with "pit" paged by search_after, get_all_pits,
    # delete_pit.
    pit = client.create_pit(index=INDEX, params={"keep_alive": "1m"})
    pid = pit["pit_id"]
    assert pit["_shards"]["failed"] == 0
    assert any(p["pit_id"] == pid for p in client.get_all_pits()["pits"])
    seen, after = [], None
    while True:
        body = {"pit": {"id": pid, "keep_alive": "1m"}, "size": 300, "sort": [{"n": "asc"}]}
        if after is not None:
            body["search_after"] = after
        r = client.search(body=body)
        assert r["pit_id"] == pid
        if not hits(r):
            break
        seen += ids(r)
        after = hits(r)[-1]["sort"]
    assert sorted(seen) == sorted(ix.docs)
    assert client.delete_pit(body={"pit_id": [pid]})["pits"][0]["successful"] is True
    with pytest.raises(NotFoundError):
        client.search(body={"pit": {"id": pid}})


def test_ids_query(client, ix):
    some = sorted(ix.docs)[:3]
    r = client.search(index=INDEX, body={"query": {"ids": {"values": some + ["no-such-id"]}}})
    assert sorted(h["_id"] for h in r["hits"]["hits"]) == some
    assert all(h["_score"] == 1.0 for h in r["hits"]["hits"])
    r = client.search(index=INDEX, body={"query": {"term": {"_id": some[0]}}})
    assert [h["_id"] for h in r["hits"]["hits"]] == [some[0]]


def test_fuzzy_match(client, ix):
    # A misspelled word (one swap) finds what the right spelling finds, with fuzziness AUTO.
    right = client.search(index=INDEX, body={"query": {"match": {"title": "boundary"}}, "size": 100})
    typo = client.search(index=INDEX, body={"query": {"match": {"title": {"query": "boudnary", "fuzziness": "AUTO"}}}, "size": 100})
    assert right["hits"]["hits"]
    assert {h["_id"] for h in right["hits"]["hits"]} <= {h["_id"] for h in typo["hits"]["hits"]}
    exact = client.search(index=INDEX, body={"query": {"match": {"title": {"query": "boudnary"}}}})
    assert exact["hits"]["hits"] == []


def test_field_caps(client, ix):
    r = client.field_caps(index=INDEX, fields="title,n,id")
    assert r["indices"] == [INDEX]
    assert r["fields"]["title"]["text"]["searchable"] is True
    assert r["fields"]["title"]["text"]["aggregatable"] is False
    assert r["fields"]["n"]["long"]["aggregatable"] is True
    assert r["fields"]["id"]["keyword"]["aggregatable"] is True
    assert set(r["fields"]) == {"title", "n", "id"}


def test_explain(client, ix):
    q = {"match": {"title": "boundary layer"}}
    top = client.search(index=INDEX, body={"query": q, "size": 1})["hits"]["hits"][0]
    e = client.explain(index=INDEX, id=top["_id"], body={"query": q})
    assert e["matched"] is True
    assert e["explanation"]["value"] == top["_score"]
    r = client.search(index=INDEX, body={"query": q, "size": 3, "explain": True})
    assert all(h["_explanation"]["value"] == h["_score"] for h in r["hits"]["hits"])


def test_collapse_inner_hits(client, ix):
    # Collapsed on `n` (each document's own number): every group's inner hits are its hit alone.
    body = {"query": {"match": {"title": "boundary"}}, "size": 5,
            "collapse": {"field": "n", "inner_hits": {"name": "same", "size": 2}}}
    r = client.search(index=INDEX, body=body)
    assert r["hits"]["hits"]
    for h in r["hits"]["hits"]:
        assert [x["_id"] for x in h["inner_hits"]["same"]["hits"]["hits"]] == [h["_id"]]


def test_optimistic_concurrency(client, ix):
    # The read-then-conditional-write pattern: _seq_no/_primary_term from a get name the version to replace.
    doc_id = "occ-1"
    r = client.index(index=INDEX, id=doc_id, body={"title": "occ", "n": 1})
    got = client.get(index=INDEX, id=doc_id)
    assert got["_seq_no"] == r["_seq_no"] and got["_primary_term"] == 1
    r2 = client.index(index=INDEX, id=doc_id, body={"title": "occ", "n": 2},
                      if_seq_no=got["_seq_no"], if_primary_term=got["_primary_term"])
    assert r2["result"] == "updated" and r2["_seq_no"] > got["_seq_no"]
    with pytest.raises(ConflictError) as e:
        client.index(index=INDEX, id=doc_id, body={"title": "occ", "n": 3},
                     if_seq_no=got["_seq_no"], if_primary_term=1)
    assert e.value.error == "version_conflict_engine_exception"
    assert client.get(index=INDEX, id=doc_id)["_source"]["n"] == 2
    with pytest.raises(ConflictError):
        client.delete(index=INDEX, id=doc_id, if_seq_no=got["_seq_no"], if_primary_term=1)
    hit = client.search(index=INDEX, body={"query": {"match": {"title": "occ"}}, "seq_no_primary_term": True})
    assert [h["_seq_no"] for h in hit["hits"]["hits"] if h["_id"] == doc_id] == [r2["_seq_no"]]
    assert client.delete(index=INDEX, id=doc_id, if_seq_no=r2["_seq_no"], if_primary_term=1)["result"] == "deleted"
    assert client.exists(index=INDEX, id=doc_id) is False
    assert client.count(index=INDEX)["count"] == len(ix.docs)


def test_cat_indices(client, ix):
    rows = client.cat.indices(format="json")
    assert isinstance(rows, list)
    row = next((r for r in rows if r["index"] == INDEX), None)
    assert row is not None, rows
    assert int(row["docs.count"]) == len(ix.docs) == client.count(index=INDEX)["count"]


def test_errors(client, ix):
    with pytest.raises(RequestError) as e:
        client.search(index=INDEX, body={"query": {"no_such_query": {}}})
    assert e.value.status_code == 400
    assert e.value.info["status"] == 400
    assert e.value.info["error"]["type"] and e.value.info["error"]["reason"]
    assert e.value.info["error"]["root_cause"]

    with pytest.raises(NotFoundError) as e:
        client.search(index=f"{INDEX}-missing", body={"query": {"match_all": {}}})
    assert e.value.status_code == 404
    assert e.value.error == "index_not_found_exception"
    assert e.value.info["error"]["root_cause"][0]["type"] == "index_not_found_exception"


def test_aliases(client, ix):
    alias = f"{INDEX}-alias"
    assert client.indices.exists_alias(name=alias) is False
    assert client.indices.put_alias(index=INDEX, name=alias)["acknowledged"] is True
    assert client.indices.exists_alias(name=alias) is True
    assert client.indices.get_alias(name=alias) == {INDEX: {"aliases": {alias: {}}}}
    # Searches, counts and gets through the alias see the index.
    assert client.count(index=alias)["count"] == len(ix.docs)
    some = next(iter(ix.docs))
    got = client.get(index=alias, id=some)
    assert got["_index"] == INDEX and got["_source"]["id"] == some
    # The atomic form: remove and add in one request.
    other = f"{INDEX}-other"
    r = client.indices.update_aliases(
        body={"actions": [{"remove": {"index": INDEX, "alias": alias}}, {"add": {"index": INDEX, "alias": other}}]}
    )
    assert r["acknowledged"] is True
    assert client.indices.exists_alias(name=alias) is False
    assert client.count(index=other)["count"] == len(ix.docs)
    client.indices.delete_alias(index=INDEX, name=other)
    with pytest.raises(NotFoundError):
        client.indices.delete_alias(index=INDEX, name=other)
    # A filtered alias: searches and counts through it see the documents passing its filter; gets do not
    # apply it (as in Elasticsearch).
    one = f"{INDEX}-one"
    client.indices.put_alias(index=INDEX, name=one, body={"filter": {"ids": {"values": [some]}}})
    assert client.indices.get_alias(name=one) == {INDEX: {"aliases": {one: {"filter": {"ids": {"values": [some]}}}}}}
    assert client.count(index=one)["count"] == 1
    hits = client.search(index=one, body={"query": {"match_all": {}}})["hits"]["hits"]
    assert [h["_id"] for h in hits] == [some]
    other_id = next(i for i in ix.docs if i != some)
    assert client.get(index=one, id=other_id)["found"] is True
    # _reindex through that alias: its filter applies; the destination is created.
    copy = f"{INDEX}-copy"
    r = client.reindex(body={"source": {"index": one}, "dest": {"index": copy}})
    assert (r["total"], r["created"], r["failures"]) == (1, 1, [])
    assert client.get(index=copy, id=some)["_source"] == got["_source"]
    client.indices.delete_alias(index=INDEX, name=one)
    client.indices.delete(index=copy)


def test_zz_delete_index(client, ix):
    # Last test of the module: deleting the index.
    r = client.indices.delete(index=INDEX)
    assert r["acknowledged"] is True
    assert client.indices.exists(index=INDEX) is False
    with pytest.raises(NotFoundError):
        client.count(index=INDEX)
