//! What the aggregation tests (`aggs.rs`, `pipeline.rs`) share: their index, of small segments so that a few
//! dozen documents span fresh, flushed and merged ones, with a keyword tag, a long, a double, a date and a
//! text body; and a constructor for aggregation trees.

use serde_json::json;
use spirit::query::aggs::{Agg, AggKind};
use spirit::{Index, IndexSettings, ShardConfig};

/// Opens (or creates) the aggregation tests' index of `shards` shards in `dir`.
pub fn open(dir: &std::path::Path, shards: usize) -> Index {
    let cfg = ShardConfig {
        dram_budget: shards * (8 << 20),
        fresh_segment_bytes: Some(shards * (256 << 10)),
        max_docs_per_segment: 9,
        ..Default::default()
    };
    let mappings = json!({"properties": {"tag": {"type": "keyword"}, "n": {"type": "long"},
        "price": {"type": "double"}, "at": {"type": "date"}, "body": {"type": "text"}}});
    let settings = IndexSettings { number_of_shards: shards, ..Default::default() };
    Index::open("a", dir, cfg, Some(&mappings), Some(settings)).unwrap()
}

pub fn agg(name: &str, kind: AggKind, aggs: Vec<Agg>) -> Agg {
    Agg { name: name.into(), kind, aggs }
}
