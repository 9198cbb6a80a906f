//! # spirit
//!
//! A real-time, persistent, tiered full-text search engine after SPIRIT (Hasnat & Akram, ACM TACO 2024).
//! Every document is searchable the moment [`Index::add`] returns; the index lives in a pre-allocated DRAM
//! heap with a hard budget and a persistent heap file, and a graceful restart maps the heap instead of
//! rebuilding anything.
//!
//! The data path, bottom up (see `ARCHITECTURE.md` next to this crate):
//! [`memory`] (heaps, rings, persistence barrier) → [`codec`] (posting blocks) → [`segment`] (fresh, image,
//! merged) → [`gdt`] (descriptor table, epochs) → [`shard`] (pipeline: ingester, flusher, engraver, merger)
//! → [`index`] / [`engine`] (documents, schema, queries); [`bulk`] loads large inputs on every core.
//!
//! ```no_run
//! use spirit::{Engine, EngineConfig, SearchOptions};
//! let engine = Engine::open("data", EngineConfig::default())?;
//! let index = engine.index_or_create("tweets")?;
//! index.add(serde_json::json!({"_id": "1", "text": "hello real-time world"}))?;
//! let res = index.search("+hello +world", &SearchOptions::default())?;
//! assert_eq!(res.hits[0].id, "1");
//! engine.close()?;
//! # Ok::<(), spirit::Error>(())
//! ```

pub mod aliases;
pub mod analysis;
pub mod bulk;
pub mod codec;
pub mod config;
pub mod durability;
pub mod engine;
pub mod error;
pub mod formats;
pub mod gdt;
pub mod index;
pub mod memory;
pub mod query;
mod rng;
pub mod schema;
pub mod segment;
pub mod shard;

pub use aliases::{AliasAction, Aliases};
pub use bulk::{bulk_load, BulkObserver, BulkOptions, BulkProgress};
pub use config::{parse_size, CommitPolicy, CompactionPolicy, Durability, RetentionPolicy, ShardConfig};
pub use engine::{default_shards, Engine, EngineConfig, IndexOptions};
pub use error::{Error, Result};
pub use index::{
    AddResult, BulkGuard, DeletedVersions, Hit, Horizon, Index, IndexSettings, IndexStats, LiveDoc, Pending,
    PendingSet, PreparedDoc, SearchResult, SortKey, SortValue, SortedPage,
};
pub use query::{Disjunction, Query, SearchOptions, Sort, MAX_SLOP};
pub use shard::Precondition;
