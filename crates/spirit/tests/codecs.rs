//! Postings codecs are chosen per field (`postings_codec` in the mappings): the same text indexed under every
//! codec answers identically — ids, scores, totals — through flushes, compaction, a force merge and a
//! restart; the choice survives the restart and shows in the mappings; bad choices are clear errors.

use serde_json::json;
use spirit::codec::DocCodec;
use spirit::{Index, SearchOptions, ShardConfig};

fn cfg() -> ShardConfig {
    ShardConfig { dram_budget: 16 << 20, max_docs_per_segment: 700, ..Default::default() }
}

/// One text field per codec, all holding the same words.
fn mappings() -> serde_json::Value {
    let mut props = serde_json::Map::new();
    for c in DocCodec::ALL {
        props.insert(format!("f_{}", c.name()), json!({"type": "text", "postings_codec": c.name()}));
    }
    props.insert("k".into(), json!({"type": "keyword", "postings_codec": "pfor"}));
    json!({ "properties": props })
}

fn text(i: u64) -> String {
    // Zipf-ish words: a few very common ones (lists of many blocks), a long tail.
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let len = 4 + i % 40;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = (x >> 11) as f64 / (1u64 << 53) as f64;
            format!("w{}", (r.powi(3) * 300.0) as u64)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn add_docs(index: &Index, range: std::ops::Range<u64>) {
    for i in range {
        let t = text(i);
        let mut doc = serde_json::Map::new();
        doc.insert("_id".into(), json!(i.to_string()));
        for c in DocCodec::ALL {
            doc.insert(format!("f_{}", c.name()), json!(t));
        }
        doc.insert("k".into(), json!(format!("k{}", i % 3)));
        index.add(serde_json::Value::Object(doc)).unwrap();
    }
}

/// Every query, on every codec's field, answers as on the bit-packed one.
fn same_answers(index: &Index) {
    let queries = [
        "F:w0",
        "F:w1",
        "F:w5 F:w40",
        "+F:w0 +F:w2",
        "+F:w1 +F:w3 +F:w7",
        "F:\"w0 w1\"",
        "F:w2 -F:w0",
        "+F:w0 +k:k1",
    ];
    for q in queries {
        let on = |codec: DocCodec| {
            let q = q.replace('F', &format!("f_{}", codec.name()));
            let exact = index.search(&q, &SearchOptions { limit: 20, ..Default::default() }).unwrap();
            let pruned = index
                .search(&q, &SearchOptions { limit: 20, track_total: false, ..Default::default() })
                .unwrap();
            let hits = |r: &spirit::index::SearchResult| {
                r.hits.iter().map(|h| (h.id.clone(), h.score)).collect::<Vec<_>>()
            };
            assert_eq!(hits(&exact), hits(&pruned), "{q}");
            (exact.total, hits(&exact))
        };
        let want = on(DocCodec::Bitpacked);
        assert!(want.0 > 0, "{q} matches nothing");
        for c in DocCodec::ALL {
            assert_eq!(on(c), want, "{q} on {}", c.name());
        }
    }
}

#[test]
fn every_codec_answers_like_bit_packing() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open("c", dir.path(), cfg(), Some(&mappings()), None).unwrap();
    add_docs(&index, 0..1500);
    // Fresh segments and flushed images.
    same_answers(&index);
    index.shard().seal().unwrap();
    index.shard().wait_idle().unwrap();
    same_answers(&index);
    add_docs(&index, 1500..2600);
    index.force_merge(1).unwrap();
    same_answers(&index);
    let m = index.schema().to_mappings();
    assert_eq!(m["properties"]["f_pfor"]["postings_codec"], "pfor");
    assert_eq!(m["properties"]["k"]["postings_codec"], "pfor");
    // The default is not spelled out.
    assert!(m["properties"]["f_bitpacked"].get("postings_codec").is_none());
    index.close().unwrap();
    drop(index);

    let index = Index::open("c", dir.path(), cfg(), None, None).unwrap();
    assert_eq!(index.schema().to_mappings()["properties"]["f_vbyte"]["postings_codec"], "vbyte");
    // The shard builds its images with the mapped codecs.
    let schema = index.schema();
    for c in DocCodec::ALL {
        let field = schema.field_id(&format!("f_{}", c.name())).unwrap();
        assert_eq!(index.shard().field_codecs().get(field), c);
    }
    same_answers(&index);
    // Documents added after the restart are encoded with the remembered codecs too.
    add_docs(&index, 2600..3400);
    index.shard().seal().unwrap();
    index.shard().wait_idle().unwrap();
    same_answers(&index);
}

#[test]
fn bad_codec_mappings_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let err = |m: serde_json::Value| {
        let d = dir.path().join(format!("i{}", rand_name(&m)));
        Index::open("c", &d, cfg(), Some(&m), None).err().expect("an error").to_string()
    };
    let e = err(json!({"properties": {"t": {"type": "text", "postings_codec": "zip"}}}));
    assert!(e.contains("unknown [postings_codec]") && e.contains("bitpacked, raw, vbyte"), "{e}");
    let e = err(json!({"properties": {"n": {"type": "long", "postings_codec": "pfor"}}}));
    assert!(e.contains("applies to text and keyword fields"), "{e}");
    let e = err(json!({"properties": {"t": {"type": "text", "postings_codec": 3}}}));
    assert!(e.contains("unknown [postings_codec]"), "{e}");

    // Changing an existing field's codec is refused (as Elasticsearch refuses changing a mapping parameter).
    let index = Index::open("c", &dir.path().join("ok"), cfg(), Some(&mappings()), None).unwrap();
    let e = index
        .put_mappings(&json!({"properties": {"f_raw": {"type": "text", "postings_codec": "pfor"}}}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot change [postings_codec] from [raw] to [pfor]"), "{e}");
    let g_missing = index.schema().field_id("g").is_none();
    assert!(g_missing);
    // Restating it is fine; a new field may take any codec.
    index.put_mappings(&json!({"properties": {"f_raw": {"type": "text", "postings_codec": "raw"}}})).unwrap();
    index
        .put_mappings(&json!({"properties": {"g": {"type": "text", "postings_codec": "streamvbyte"}}}))
        .unwrap();
    assert_eq!(index.schema().to_mappings()["properties"]["g"]["postings_codec"], "streamvbyte");
    let g = index.schema().field_id("g").unwrap();
    assert_eq!(index.shard().field_codecs().get(g), DocCodec::Streamvbyte);
}

fn rand_name(v: &serde_json::Value) -> u64 {
    v.to_string().bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
}
