//! Queries: the AST every front end produces, the Lucene-style query-string parser, the planner that turns
//! an AST into weights against a GDT snapshot (analysis, prefix expansion, index-wide BM25 statistics), and
//! the document-at-a-time evaluator that scores and collects top-k per segment.

pub mod aggs;
pub mod ast;
mod cache;
mod eval;
pub mod parser;
pub mod pipeline;
mod plan;
pub mod regexp;
mod scratch;
pub mod suggest;
mod wildcard;

pub use ast::{FuzzyOptions, Query, MAX_SLOP};
pub use cache::{CacheStats, ResultCache};
pub use eval::{
    collection_stats, execute, execute_at, execute_cached, explain, matching_docs, scored_matches,
    watermarks, Bm25, CollectionStats, Disjunction, Explanation, ScoredDoc, SearchHits, SearchOptions, Sort,
    Watermarks,
};
pub use parser::{parse, parse_with, ParseError, ParseOptions};
pub(crate) use plan::keys_with_prefix;
pub use plan::{plan, plan_shards, Node, MAX_PREFIX_EXPANSION};
pub use regexp::{Regexp, RegexpFlags};
pub use wildcard::Pattern;
