//! `_search` and `_count`: the request body (and the URL parameters Elasticsearch accepts in its place), run
//! against one index — or several, merged ([`SearchRequest::execute_on`]) — on the query pool, answered in
//! Elasticsearch's response shape.

use crate::dsl::Translator;
use crate::error::{ApiError, ApiResult};
use crate::highlight::{HighlightSpec, Highlighter};
use crate::{Limits, Target};
use serde_json::{json, Map, Value};
use spirit::query::aggs::Agg;
use spirit::schema::simple_match as glob;
use spirit::schema::{FieldType, Schema};
use spirit::{Horizon, Index, Query, SearchOptions, Sort, SortKey, SortValue, SortedPage};
use std::collections::HashMap;
use std::time::Duration;

/// `_source` filtering.
#[derive(Debug, Clone, Default)]
pub struct SourceFilter {
    /// `_source: false`.
    pub off: bool,
    pub includes: Vec<String>,
    pub excludes: Vec<String>,
}

impl SourceFilter {
    pub fn parse(v: &Value) -> ApiResult<SourceFilter> {
        let strings = |v: &Value| -> ApiResult<Vec<String>> {
            match v {
                Value::String(s) => Ok(vec![s.clone()]),
                Value::Array(a) => a
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| ApiError::parsing("[_source] patterns must be strings"))
                    })
                    .collect(),
                _ => Err(ApiError::parsing("[_source] patterns must be strings")),
            }
        };
        Ok(match v {
            Value::Bool(b) => SourceFilter { off: !b, ..Default::default() },
            Value::Object(m) => SourceFilter {
                off: false,
                includes: m
                    .get("includes")
                    .or(m.get("include"))
                    .map(strings)
                    .transpose()?
                    .unwrap_or_default(),
                excludes: m
                    .get("excludes")
                    .or(m.get("exclude"))
                    .map(strings)
                    .transpose()?
                    .unwrap_or_default(),
            },
            other => SourceFilter { off: false, includes: strings(other)?, excludes: vec![] },
        })
    }

    /// From the URL: `_source=false|a,b`, `_source_includes=`, `_source_excludes=`.
    pub fn from_params(p: &HashMap<String, String>) -> Option<SourceFilter> {
        let list = |s: &str| s.split(',').filter(|x| !x.is_empty()).map(str::to_string).collect::<Vec<_>>();
        let mut f = SourceFilter::default();
        let mut any = false;
        if let Some(s) = p.get("_source") {
            any = true;
            match s.as_str() {
                "false" => f.off = true,
                "true" | "" => {}
                s => f.includes = list(s),
            }
        }
        if let Some(s) = p.get("_source_includes") {
            any = true;
            f.includes = list(s);
        }
        if let Some(s) = p.get("_source_excludes") {
            any = true;
            f.excludes = list(s);
        }
        any.then_some(f)
    }

    /// The filtered source (`None` when `_source` is off).
    pub fn apply(&self, source: Value) -> Option<Value> {
        if self.off {
            return None;
        }
        if self.includes.is_empty() && self.excludes.is_empty() {
            return Some(source);
        }
        Some(self.filter(source, ""))
    }

    fn filter(&self, v: Value, prefix: &str) -> Value {
        let Value::Object(m) = v else { return v };
        let mut out = Map::new();
        for (k, v) in m {
            let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            if self.excludes.iter().any(|p| glob(p, &path)) {
                continue;
            }
            let whole = self.includes.is_empty()
                || self.includes.iter().any(|p| glob(p, &path) || path.starts_with(&format!("{p}.")));
            if whole {
                out.insert(k, self.filter_excludes_only(v, &path));
            } else if v.is_object()
                && self.includes.iter().any(|p| p.contains('*') || p.starts_with(&format!("{path}.")))
            {
                let inner = self.filter(v, &path);
                if inner.as_object().is_some_and(|o| !o.is_empty()) {
                    out.insert(k, inner);
                }
            }
        }
        Value::Object(out)
    }

    fn filter_excludes_only(&self, v: Value, prefix: &str) -> Value {
        if self.excludes.is_empty() {
            return v;
        }
        let Value::Object(m) = v else { return v };
        Value::Object(
            m.into_iter()
                .filter_map(|(k, v)| {
                    let path = format!("{prefix}.{k}");
                    (!self.excludes.iter().any(|p| glob(p, &path))).then(|| {
                        let v = self.filter_excludes_only(v, &path);
                        (k, v)
                    })
                })
                .collect(),
        )
    }
}

/// The order asked for: one of the engine's single-key sorts (pruned top-k), or several keys
/// ([`Index::search_sorted`]: every match ordered; also a single key the others do not cover, and any sort
/// paged with `search_after`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SortSpec {
    Score,
    Newest,
    Field { name: String, descending: bool },
    Keys(Vec<KeySpec>),
}

/// One sort key as asked for: `_score`, `_doc` (insertion order) or a numeric or date field.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeySpec {
    pub(crate) name: String,
    pub(crate) descending: bool,
    /// `"missing": "_first"` (default `_last`).
    pub(crate) missing_first: bool,
}

impl SortSpec {
    /// The keys of this order, for the several-keys path.
    pub(crate) fn keys(&self) -> Vec<KeySpec> {
        let key = |name: &str, descending| KeySpec { name: name.into(), descending, missing_first: false };
        match self {
            SortSpec::Score => vec![key("_score", true)],
            SortSpec::Newest => vec![key("_doc", true)],
            SortSpec::Field { name, descending } => vec![key(name, *descending)],
            SortSpec::Keys(k) => k.clone(),
        }
    }
}

/// How many hits to count: Elasticsearch's `track_total_hits` (default 10,000).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum TrackTotal {
    Off,
    UpTo(u64),
    Exact,
}

/// A parsed search request.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    query: Value,
    from: usize,
    pub(crate) size: usize,
    pub(crate) sort: SortSpec,
    pub(crate) track: TrackTotal,
    source: SourceFilter,
    highlight: Option<HighlightSpec>,
    /// `?request_cache=false` bypasses the result cache (answers are the same either way).
    cache: bool,
    /// `aggs` (or `aggregations`), translated when the request runs (filters are queries on the schema).
    pub(crate) aggs: Option<Value>,
    /// `post_filter`: filters the hits (and their count) but not what aggregations read, as in
    /// Elasticsearch; it scores nothing.
    post_filter: Option<Value>,
    /// `suggest`: term suggestions ([`crate::suggest`]).
    suggest: Vec<crate::suggest::TermSuggestion>,
    /// `collapse`: one hit per value of this field (its best in the order), as Elasticsearch's field
    /// collapsing; `from` and `size` count groups.
    pub(crate) collapse: Option<String>,
    /// `collapse.inner_hits`: each collapsed hit's group, expanded ([`Self::expand`]).
    inner_hits: Vec<InnerHits>,
    /// `min_score`: only hits scoring at least this, counted too.
    min_score: Option<f32>,
    /// `pit`: run in this point in time ([`crate::pit`]).
    pub(crate) pit: Option<crate::pit::PitRef>,
    /// `version` and `seq_no_primary_term`: each hit's `_version`, and its `_seq_no` (doc id in its
    /// shard, what a conditional write names) and `_primary_term` (1).
    version: bool,
    seq_no: bool,
    /// `explain`: each hit's `_explanation` ([`Index::explain_hits`], right after the search: the query
    /// planned once more, then scorers per query node on each hit).
    explain: bool,
    /// `search_after`: the previous page's last `sort` values (`None` for a missing value).
    pub(crate) after: Option<Vec<Option<SortValue>>>,
    /// `?scroll=1m`: open a scroll ([`crate::scroll`]) kept this long after each page.
    pub(crate) scroll: Option<Duration>,
}

/// One `collapse.inner_hits` definition: the hits of each collapsed hit's group beside its best one.
#[derive(Debug, Clone)]
struct InnerHits {
    name: String,
    /// The search each group runs, parsed once, its query and post filter set per group: the definition's
    /// `from`, `size` (default 3, as Elasticsearch's), `sort`, `_source`, `highlight`, `version` and
    /// `seq_no_primary_term`; never through the result cache (each group's query is asked once).
    template: SearchRequest,
}

/// Most `from + size` of an inner hits definition (Elasticsearch's `index.max_inner_result_window`).
const MAX_INNER_WINDOW: usize = 100;

/// Most group searches one request may run: hits asked for (`size`) times inner hits definitions. They run
/// one after another on the request's query thread (Elasticsearch runs them as a multi-search).
pub(crate) const MAX_GROUP_SEARCHES: usize = 1_000;

/// `collapse.inner_hits`: an object or an array of them, each named, checked now (its search body parsed
/// once, as every group's search runs it); `size` hits a page, each expanded by every definition.
fn parse_inner_hits(v: &Value, size: usize, limits: &Limits) -> ApiResult<Vec<InnerHits>> {
    let items: Vec<&Value> = match v {
        Value::Array(a) => a.iter().collect(),
        one => vec![one],
    };
    let searches = size.saturating_mul(items.len());
    if searches > MAX_GROUP_SEARCHES {
        return Err(ApiError::bad_request(format!(
            "[collapse] with [inner_hits] runs a search per hit and definition: {size} hits x {} definitions is \
             more than the {MAX_GROUP_SEARCHES} a request may run",
            items.len()
        )));
    }
    let mut names = std::collections::HashSet::new();
    let mut out: Vec<InnerHits> = vec![];
    for item in items {
        let o = item
            .as_object()
            .ok_or_else(|| ApiError::parsing("[inner_hits] must be an object or an array of objects"))?;
        let (mut name, mut body) = (None, Map::new());
        for (k, v) in o {
            match k.as_str() {
                "name" => {
                    name = Some(
                        v.as_str()
                            .ok_or_else(|| ApiError::parsing("[inner_hits] [name] must be a string"))?,
                    )
                }
                "from"
                | "size"
                | "sort"
                | "_source"
                | "highlight"
                | "version"
                | "seq_no_primary_term"
                | "track_scores" => {
                    body.insert(k.clone(), v.clone());
                }
                "explain" | "collapse" | "script_fields" | "docvalue_fields" | "stored_fields" | "fields"
                | "ignore_unmapped" => return Err(ApiError::unsupported(format!("[inner_hits] with [{k}]"))),
                other => return Err(ApiError::parsing(format!("[inner_hits] unknown field [{other}]"))),
            }
        }
        let name = name.ok_or_else(|| {
            ApiError::bad_request(
                "inner_hits must have a [name]; set the [name] field in the inner_hits definition",
            )
        })?;
        if !names.insert(name) {
            return Err(ApiError::bad_request(format!(
                "[inner_hits] already contains an entry for key [{name}]"
            )));
        }
        body.entry("size").or_insert(json!(3));
        let mut template =
            SearchRequest::parse(&serde_json::to_vec(&body).expect("JSON"), &HashMap::new(), limits)?;
        template.cache = false;
        let window = template.from.saturating_add(template.size);
        if window > MAX_INNER_WINDOW {
            return Err(ApiError::bad_request(format!(
                "Inner result window is too large, the inner hit definition's [{name}]'s from + size must be less \
                 than or equal to: [{MAX_INNER_WINDOW}] but was [{window}]. This limit can be set by changing the \
                 [index.max_inner_result_window] index level setting."
            )));
        }
        out.push(InnerHits { name: name.to_string(), template });
    }
    Ok(out)
}

/// A request's queries on one index.
struct Translated {
    /// What the hits come from: `matches` filtered by `post_filter`.
    hits: Query,
    /// The request's query alone: what highlighting marks.
    query: Query,
    /// The query filtered by the alias the index was reached through: what aggregations read.
    matches: Query,
    aggs: Option<Vec<Agg>>,
}

/// A page of a scroll on one index: the documents below `horizon`, after the sort values `after`.
#[derive(Clone, Copy)]
pub(crate) struct Within<'a> {
    pub(crate) horizon: &'a Horizon,
    pub(crate) after: Option<&'a [Option<SortValue>]>,
}

const KNOWN_KEYS: &[&str] = &[
    "query",
    "from",
    "size",
    "sort",
    "_source",
    "track_total_hits",
    "highlight",
    "timeout",
    "version",
    "explain",
    "seq_no_primary_term",
    "track_scores",
    "aggs",
    "aggregations",
    "search_after",
    "post_filter",
    "suggest",
    "collapse",
    "min_score",
    "pit",
];

impl SearchRequest {
    /// From a request body (may be empty) and the URL parameters.
    pub fn parse(body: &[u8], params: &HashMap<String, String>, limits: &Limits) -> ApiResult<SearchRequest> {
        let body = json_or_empty(body)?;
        let obj = body.as_object().ok_or_else(|| ApiError::parsing("request body must be a JSON object"))?;
        for k in obj.keys() {
            if !KNOWN_KEYS.contains(&k.as_str()) {
                return Err(ApiError::parsing(format!("unknown key [{k}] in the search request")));
            }
        }
        let num = |key: &str, default: usize| -> ApiResult<usize> {
            match (obj.get(key), params.get(key)) {
                (Some(v), _) => v
                    .as_u64()
                    .map(|n| n as usize)
                    .ok_or_else(|| ApiError::parsing(format!("[{key}] must be a non-negative integer"))),
                (None, Some(s)) => s
                    .parse()
                    .map_err(|_| ApiError::parsing(format!("[{key}] must be a non-negative integer"))),
                (None, None) => Ok(default),
            }
        };
        let from = num("from", 0)?;
        let size = num("size", 10)?;
        if from.saturating_add(size) > limits.max_result_window {
            return Err(ApiError::bad_request(format!(
                "Result window is too large, from + size must be less than or equal to: [{}] but was [{}]",
                limits.max_result_window,
                from.saturating_add(size)
            )));
        }
        let query = request_query(obj.get("query"), params).unwrap_or_else(|| json!({"match_all": {}}));
        let sort = match obj.get("sort") {
            Some(s) => parse_sort(s)?,
            None => match params.get("sort") {
                Some(s) => parse_sort(&Value::Array(s.split(',').map(|x| json!(x)).collect()))?,
                None => SortSpec::Score,
            },
        };
        let track = match obj.get("track_total_hits") {
            Some(Value::Bool(true)) => TrackTotal::Exact,
            Some(Value::Bool(false)) => TrackTotal::Off,
            Some(Value::Number(n)) if n.as_i64() == Some(-1) => TrackTotal::Exact,
            Some(Value::Number(n)) => TrackTotal::UpTo(
                n.as_u64()
                    .ok_or_else(|| ApiError::parsing("[track_total_hits] must be a boolean or an integer"))?,
            ),
            Some(_) => return Err(ApiError::parsing("[track_total_hits] must be a boolean or an integer")),
            None => {
                match params.get("track_total_hits").map(String::as_str) {
                    Some("true") => TrackTotal::Exact,
                    Some("false") => TrackTotal::Off,
                    Some(n) => TrackTotal::UpTo(n.parse().map_err(|_| {
                        ApiError::parsing("[track_total_hits] must be a boolean or an integer")
                    })?),
                    None => TrackTotal::UpTo(10_000),
                }
            }
        };
        let source = match (obj.get("_source"), SourceFilter::from_params(params)) {
            (Some(v), _) => SourceFilter::parse(v)?,
            (None, Some(f)) => f,
            (None, None) => SourceFilter::default(),
        };
        let highlight = obj.get("highlight").map(HighlightSpec::parse).transpose()?;
        let cache = match params.get("request_cache").map(String::as_str) {
            None | Some("true") | Some("") => true,
            Some("false") => false,
            Some(v) => {
                return Err(ApiError::parsing(format!("[request_cache] must be true or false, got [{v}]")));
            }
        };
        let aggs = match (obj.get("aggs"), obj.get("aggregations")) {
            (Some(_), Some(_)) => {
                return Err(ApiError::parsing("found both [aggs] and [aggregations] in the search request"))
            }
            (a, b) => a.or(b).cloned(),
        };
        let flag = |key: &str| -> ApiResult<bool> {
            match (obj.get(key), params.get(key).map(String::as_str)) {
                (Some(v), _) => {
                    v.as_bool().ok_or_else(|| ApiError::parsing(format!("[{key}] must be a boolean")))
                }
                (None, None | Some("false")) => Ok(false),
                (None, Some("true" | "")) => Ok(true),
                (None, Some(v)) => {
                    Err(ApiError::parsing(format!("[{key}] must be true or false, got [{v}]")))
                }
            }
        };
        let (version, seq_no, explain) = (flag("version")?, flag("seq_no_primary_term")?, flag("explain")?);
        let after = match obj.get("search_after") {
            None => None,
            Some(Value::Array(values)) => {
                if from > 0 {
                    return Err(ApiError::bad_request(
                        "[from] parameter must be set to 0 when [search_after] is used",
                    ));
                }
                Some(sort_values(values)?)
            }
            Some(_) => return Err(ApiError::parsing("[search_after] must be an array of sort values")),
        };
        let sort = match (sort, &after) {
            (SortSpec::Keys(k), _) => SortSpec::Keys(k),
            (single, Some(_)) => SortSpec::Keys(single.keys()),
            (single, None) => single,
        };
        let scroll = params.get("scroll").map(|s| crate::scroll::keep_alive(s)).transpose()?;
        let pit = obj.get("pit").map(crate::pit::PitRef::parse).transpose()?;
        if pit.is_some() && scroll.is_some() {
            return Err(ApiError::bad_request("a point in time and a scroll cannot be used together"));
        }
        let min_score = match obj.get("min_score") {
            None => None,
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() => Some(x as f32),
                _ => return Err(ApiError::parsing("[min_score] must be a number")),
            },
        };
        if min_score.is_some() && aggs.is_some() {
            return Err(ApiError::unsupported(
                "[min_score] together with aggregations (spirit's aggregations read every match of the query)",
            ));
        }
        let mut inner_hits = vec![];
        let collapse = match obj.get("collapse") {
            None => None,
            Some(Value::Object(c)) => {
                for k in c.keys() {
                    match k.as_str() {
                        "field" => {}
                        "max_concurrent_group_searches" => {
                            // Checked as Elasticsearch checks it; the group searches run one at a time.
                            if c[k].as_u64().is_none_or(|n| n == 0) {
                                return Err(ApiError::bad_request(
                                    "[max_concurrent_group_searches] must be positive",
                                ));
                            }
                        }
                        "inner_hits" => inner_hits = parse_inner_hits(&c["inner_hits"], size, limits)?,
                        other => {
                            return Err(ApiError::parsing(format!("unknown key [{other}] in [collapse]")))
                        }
                    }
                }
                let field = c.get("field").and_then(Value::as_str);
                Some(
                    field
                        .ok_or_else(|| ApiError::parsing("[collapse] needs a [field] (a string)"))?
                        .to_string(),
                )
            }
            Some(_) => return Err(ApiError::parsing("[collapse] must be an object")),
        };
        if let Some(field) = &collapse {
            if scroll.is_some() {
                return Err(ApiError::bad_request("cannot use `collapse` in a scroll context"));
            }
            // Elasticsearch's rule: pages after a hit only make sense when the hits are in groups' order.
            let on_field = matches!(&sort, SortSpec::Field { name, .. } if name == field)
                || matches!(&sort, SortSpec::Keys(k) if k.len() == 1 && &k[0].name == field);
            if after.is_some() && !on_field {
                return Err(ApiError::bad_request(
                    "cannot use `collapse` in conjunction with `search_after` unless the search is sorted on the \
                     same field as the collapse field",
                ));
            }
        }
        if scroll.is_some() {
            // Elasticsearch's refusals, in its words.
            if from > 0 {
                return Err(ApiError::bad_request("using [from] is not allowed in a scroll context"));
            }
            if after.is_some() {
                return Err(ApiError::bad_request("[search_after] cannot be used in a scroll context"));
            }
            if track == TrackTotal::Off {
                return Err(ApiError::bad_request(
                    "disabling [track_total_hits] is not allowed in a scroll context",
                ));
            }
            if size == 0 {
                return Err(ApiError::bad_request("[size] cannot be [0] in a scroll context"));
            }
            if params.get("request_cache").map(String::as_str) == Some("true") {
                return Err(ApiError::bad_request("[request_cache] cannot be used in a scroll context"));
            }
        }
        Ok(SearchRequest {
            query,
            from,
            size,
            sort,
            track,
            source,
            highlight,
            cache,
            aggs,
            version,
            seq_no,
            explain,
            after,
            scroll,
            post_filter: obj.get("post_filter").cloned(),
            suggest: obj.get("suggest").map(crate::suggest::parse).transpose()?.unwrap_or_default(),
            collapse,
            inner_hits,
            min_score,
            pit,
        })
    }

    /// Runs the search (on a query-pool thread) and builds the response.
    pub fn execute(&self, index: &Index, limits: &Limits) -> ApiResult<Value> {
        self.execute_page(index, None, limits, (self.from, self.size), true, None)
    }

    /// Runs the search on every index of `targets` (a multi-target search: `a,b/_search`, `logs-*/_search`,
    /// `/_search`). Each index answers its first `from + size` hits, ranked by its own statistics — as
    /// Elasticsearch's default query-then-fetch ranks by each shard's — and the pages are merged in the
    /// request's order (ties by index name, then each index's own order); totals and shard counts add up.
    /// Aggregations read every index's matches at once ([`Index::aggregate_indices`]), each index's
    /// translated for its own mapping: exact over all of them, as over one index. A target's alias filter
    /// filters every query on it.
    pub fn execute_on(&self, targets: &[Target], limits: &Limits) -> ApiResult<Value> {
        if self.pit.is_some() {
            // Only `/_search` runs a request in its point in time (`crate::pit`).
            return Err(ApiError::unsupported("[pit] here (only in a /_search request)"));
        }
        if let [one] = targets {
            let mut out = self.execute_page(
                &one.index,
                one.filter.as_ref(),
                limits,
                (self.from, self.size),
                true,
                None,
            )?;
            if let Some(Value::Array(hits)) = out["hits"].get_mut("hits") {
                self.expand(hits, targets, limits)?;
            }
            if let Some(s) = self.suggestions_on(targets)? {
                out["suggest"] = s;
            }
            return Ok(out);
        }
        let t0 = std::time::Instant::now();
        let keys = self.sort.keys();
        let (mut pages, mut total, mut gte, mut best, mut shards) = (vec![], 0u64, false, None::<f64>, 0);
        for (rank, t) in targets.iter().enumerate() {
            let mut r = self.execute_page(
                &t.index,
                t.filter.as_ref(),
                limits,
                (0, self.from + self.size),
                false,
                None,
            )?;
            if let Some(t) = r["hits"].get("total") {
                total += t["value"].as_u64().unwrap_or(0);
                gte |= t["relation"] == "gte";
            }
            // Over each index's best, not only this page's.
            if let Some(m) = r["hits"]["max_score"].as_f64() {
                best = Some(best.map_or(m, |x: f64| x.max(m)));
            }
            shards += t.index.shards().len();
            pages.push((rank, take_hits(&mut r)));
        }
        let mut hits = merge_pages(&self.sort, &keys, pages);
        if let Some(field) = &self.collapse {
            // Each index gave its best `from + size` groups; a group several indices have keeps its best hit.
            let mut seen = std::collections::HashSet::new();
            hits.retain(|h| seen.insert(h.0.get("fields").map_or("null".into(), |f| f[field].to_string())));
        }
        let mut page: Vec<Value> = hits.into_iter().skip(self.from).take(self.size).map(|h| h.0).collect();
        self.expand(&mut page, targets, limits)?;
        let mut out = response(page, self.total_json(total, !gte), best, shards, vec![]);
        if let Some(aggs) = self.aggregations_on(targets, limits)? {
            out["aggregations"] = aggs;
        }
        if let Some(s) = self.suggestions_on(targets)? {
            out["suggest"] = s;
        }
        out["took"] = json!(t0.elapsed().as_millis() as u64);
        Ok(out)
    }

    /// Elasticsearch's expand phase: with `collapse.inner_hits`, each hit of a collapsed page gets, under
    /// `inner_hits`, the hits of its group — the request's query over the same `targets`, filtered to the
    /// hit's collapse value (or to documents without one), and its `post_filter`, as Elasticsearch filters
    /// them — one search per hit and definition, each with the definition's window, order and fetch options.
    fn expand(&self, hits: &mut [Value], targets: &[Target], limits: &Limits) -> ApiResult<()> {
        let Some(field) = self.collapse.as_ref().filter(|_| !self.inner_hits.is_empty()) else {
            return Ok(());
        };
        // The group's bool adds two levels and two clauses to a query the limits already admitted.
        let limits =
            Limits { max_depth: limits.max_depth + 2, max_clauses: limits.max_clauses + 2, ..limits.clone() };
        for hit in hits {
            let group = match hit.get("fields").and_then(|f| f[field].get(0)) {
                Some(v) => json!({"bool": {"must": [self.query], "filter": [{"term": {field: v}}]}}),
                None => json!({"bool": {"must": [self.query], "must_not": [{"exists": {"field": field}}]}}),
            };
            let mut inner = Map::new();
            for definition in &self.inner_hits {
                let mut req = definition.template.clone();
                req.query = group.clone();
                req.post_filter = self.post_filter.clone();
                let mut r = req.execute_on(targets, &limits)?;
                inner.insert(definition.name.clone(), json!({"hits": r["hits"].take()}));
            }
            hit["inner_hits"] = Value::Object(inner);
        }
        Ok(())
    }

    /// The request's aggregations (if it has any) over every index of `targets` at once, rendered.
    pub(crate) fn aggregations_on(&self, targets: &[Target], limits: &Limits) -> ApiResult<Option<Value>> {
        if self.aggs.is_none() {
            return Ok(None);
        }
        if targets.is_empty() {
            // No index matched: every aggregation over no documents (empty buckets, null metrics).
            let empty = Schema::default();
            let t = self.translate(&empty, None, None, limits)?;
            let aggs = t.aggs.expect("the request has aggregations");
            let target = spirit::query::aggs::AggTarget {
                schema: &empty,
                snaps: vec![],
                query: &t.matches,
                aggs: &aggs,
            };
            let (_, results) = spirit::query::aggs::aggregate_targets(&[target])?;
            return Ok(Some(crate::aggs::render(&results, &aggs, &[&empty])));
        }
        let translated = targets
            .iter()
            .map(|t| {
                let schema = t.index.schema();
                let t = self.translate(&schema, Some(t.index.settings()), t.filter.as_ref(), limits)?;
                Ok((schema, t.matches, t.aggs.expect("the request has aggregations")))
            })
            .collect::<ApiResult<Vec<_>>>()?;
        let args: Vec<(&Index, &Query, &[Agg])> =
            targets.iter().zip(&translated).map(|(t, (_, q, aggs))| (&*t.index, q, &aggs[..])).collect();
        let (_, results) = Index::aggregate_indices(&args)?;
        let schemas: Vec<&Schema> = translated.iter().map(|t| &t.0).collect();
        Ok(Some(crate::aggs::render(&results, &translated[0].2, &schemas)))
    }

    /// `hits.total` for `total` matches (counted to the end when `exact`), as `track_total_hits` asks
    /// (`None`: off).
    pub(crate) fn total_json(&self, total: u64, exact: bool) -> Option<Value> {
        match self.track {
            TrackTotal::Off => None,
            TrackTotal::UpTo(n) if total > n => Some(json!({"value": n, "relation": "gte"})),
            _ => Some(json!({"value": total, "relation": relation(exact)})),
        }
    }

    /// The request's suggestions over `targets`, rendered (`None` without any).
    pub(crate) fn suggestions_on(&self, targets: &[Target]) -> ApiResult<Option<Value>> {
        if self.suggest.is_empty() {
            return Ok(None);
        }
        Ok(Some(crate::suggest::run(&self.suggest, targets)?))
    }

    /// Whether the request has suggestions.
    pub(crate) fn has_suggest(&self) -> bool {
        !self.suggest.is_empty()
    }

    /// `from` and `size`.
    pub(crate) fn window(&self) -> (usize, usize) {
        (self.from, self.size)
    }

    /// What the hits' plan depends on besides an index's mapping and alias filter: the query and the post
    /// filter, as JSON (a point in time keeps a plan per distinct one).
    pub(crate) fn plan_key(&self) -> String {
        json!([self.query, self.post_filter]).to_string()
    }

    /// Whether the request needs the several-keys path whatever its sort: collapsing and `min_score` read
    /// every match.
    fn several_keys(&self) -> bool {
        self.collapse.is_some() || self.min_score.is_some()
    }

    /// The query the hits of `target`'s index come from (filtered by its alias filter and `post_filter`).
    pub(crate) fn query_on(&self, target: &Target, limits: &Limits) -> ApiResult<Query> {
        Ok(self
            .translate(&target.index.schema(), Some(target.index.settings()), target.filter.as_ref(), limits)?
            .hits)
    }

    /// The request's queries and aggregations on an index of `schema` reached through an alias with
    /// `filter` (their filters are queries on the schema).
    fn translate(
        &self,
        schema: &Schema,
        settings: Option<&spirit::IndexSettings>,
        filter: Option<&Value>,
        limits: &Limits,
    ) -> ApiResult<Translated> {
        let mut tr = Translator::new(schema, limits.max_clauses, limits.max_depth);
        if let Some(settings) = settings {
            tr = tr.on_index(settings);
        }
        let query: Query = tr.query(&self.query)?;
        let matches = filtered(query.clone(), filter, &mut tr)?;
        let hits = filtered(matches.clone(), self.post_filter.as_ref(), &mut tr)?;
        let aggs = self.aggs.as_ref().map(|a| crate::aggs::parse(a, &mut tr, 0)).transpose()?;
        Ok(Translated { hits, query, matches, aggs })
    }

    /// [`Self::execute`] for the hits from `from`, `size` of them, the query filtered by `filter`; with
    /// `aggregate`, the request's aggregations too; `within` a scroll's horizon, after its cursor (the
    /// request's sort is then several keys).
    pub(crate) fn execute_page(
        &self,
        index: &Index,
        filter: Option<&Value>,
        limits: &Limits,
        (from, size): (usize, usize),
        aggregate: bool,
        within: Option<Within<'_>>,
    ) -> ApiResult<Value> {
        let t0 = std::time::Instant::now();
        let schema = index.schema();
        let Translated { hits: q, query, matches, aggs } =
            self.translate(&schema, Some(index.settings()), filter, limits)?;
        let aggs = aggs.filter(|_| aggregate);
        let fetch = size > 0;
        // A keyword field sorts through the several-keys path (the engine's pruned top-k reads numbers).
        let keyword =
            |name: &str| schema.field_id(name).is_some_and(|f| schema.field(f).ty == FieldType::Keyword);
        // Collapsing runs on the several-keys path too.
        let spec = match &self.sort {
            SortSpec::Field { name, .. } if keyword(name) || self.several_keys() => {
                SortSpec::Keys(self.sort.keys())
            }
            SortSpec::Score | SortSpec::Newest if self.several_keys() => SortSpec::Keys(self.sort.keys()),
            other => other.clone(),
        };
        // What the hits show: a collapsed search by score shows scores, not `sort` values.
        let shown = match (&self.sort, &spec) {
            (SortSpec::Score, SortSpec::Keys(_)) if self.several_keys() => SortSpec::Score,
            _ => spec.clone(),
        };
        let sort = match &spec {
            SortSpec::Score => Some(Sort::Score),
            SortSpec::Newest => Some(Sort::Newest),
            SortSpec::Field { name, descending } => Some(index.field_sort(name, *descending)?),
            SortSpec::Keys(_) => None,
        };
        assert!(within.is_none() || sort.is_none(), "a scroll page sorts by several keys");
        let res = match sort {
            Some(sort) => {
                let opts = SearchOptions {
                    limit: size,
                    offset: from,
                    sort,
                    track_total: self.track != TrackTotal::Off,
                    fetch,
                    cache: self.cache,
                    ..Default::default()
                };
                index.search_query(&q, &opts)?
            }
            None => {
                let keys = spec
                    .keys()
                    .iter()
                    .map(|k| match k.name.as_str() {
                        "_score" => Ok(SortKey::Score { descending: k.descending }),
                        "_doc" => Ok(SortKey::Seq { descending: k.descending }),
                        name => index.sort_field(name, k.descending, k.missing_first),
                    })
                    .collect::<spirit::Result<Vec<_>>>()?;
                let page = SortedPage {
                    after: within.map_or(self.after.as_deref(), |w| w.after),
                    offset: from,
                    limit: size,
                    fetch,
                    horizon: within.map(|w| w.horizon),
                    collapse: self.collapse.as_ref().map(|f| collapse_key(index, &schema, f)).transpose()?,
                    min_score: self.min_score,
                };
                index.search_sorted_with(&q, &keys, &page)?
            }
        };
        // Of the query the hits came from (the alias filter and post filter are filter clauses: they add 0).
        let explained = if self.explain {
            index.explain_hits(&q, &res.hits.iter().map(|h| (h.shard, h.doc)).collect::<Vec<_>>())?
        } else {
            vec![]
        };
        let highlighter = self.highlight.as_ref().map(|h| Highlighter::new(h, &schema, &query));
        let name = index.name();
        let mut max_score: Option<f32> = None;
        let hits: Vec<Value> = res
            .hits
            .iter()
            .enumerate()
            .map(|(at, h)| {
                let mut hit = Map::new();
                hit.insert("_index".into(), json!(name));
                hit.insert("_id".into(), json!(h.id));
                // A hit whose segment retention dropped since the search has no version to show.
                if let Some(v) = self.version.then(|| index.version_of(h.shard, h.doc)).transpose()?.flatten()
                {
                    hit.insert("_version".into(), json!(v));
                }
                if self.seq_no {
                    hit.insert("_seq_no".into(), json!(h.doc));
                    hit.insert("_primary_term".into(), json!(1));
                }
                if let Some(Some(e)) = explained.get(at) {
                    hit.insert("_explanation".into(), json!(e));
                }
                if let (Some(field), Some(v)) = (&self.collapse, &h.collapse_value) {
                    // As Elasticsearch fetches the field: a date formatted, a double as a double; nothing
                    // for a hit without a value.
                    let ty = schema.field_id(field).map(|f| schema.field(f).ty);
                    let shown = match (ty, v) {
                        (Some(FieldType::Date), SortValue::Number(ms)) => {
                            json!(spirit::schema::format_date_millis(*ms as i64))
                        }
                        (Some(FieldType::Double), SortValue::Number(x)) => json!(x),
                        _ => sort_value(Some(v)),
                    };
                    hit.insert("fields".into(), json!({ field: [shown] }));
                }
                match &shown {
                    SortSpec::Keys(keys) => {
                        if keys.iter().any(|k| k.name == "_score") {
                            max_score = Some(max_score.map_or(h.score, |m| m.max(h.score)));
                            hit.insert("_score".into(), json!(h.score));
                        } else {
                            hit.insert("_score".into(), Value::Null);
                        }
                        hit.insert(
                            "sort".into(),
                            Value::Array(h.sort_values.iter().map(|v| sort_value(v.as_ref())).collect()),
                        );
                    }
                    SortSpec::Newest => {
                        hit.insert("_score".into(), Value::Null);
                        hit.insert("sort".into(), json!([h.seq]));
                    }
                    SortSpec::Field { .. } => {
                        hit.insert("_score".into(), Value::Null);
                        hit.insert(
                            "sort".into(),
                            json!([sort_value(h.sort_value.map(SortValue::Number).as_ref())]),
                        );
                    }
                    SortSpec::Score => {
                        max_score = Some(max_score.map_or(h.score, |m| m.max(h.score)));
                        hit.insert("_score".into(), json!(h.score));
                    }
                }
                let source = h.source_json();
                if let Some(hl) = highlighter.as_ref().and_then(|hl| hl.highlight(&source)) {
                    hit.insert("highlight".into(), hl);
                }
                if let Some(s) = self.source.apply(source) {
                    hit.insert("_source".into(), s);
                }
                Ok(Value::Object(hit))
            })
            .collect::<ApiResult<_>>()?;
        let shards = index.shards().len();
        let total = self.total_json(res.total, res.total_exact);
        let mut out = response(hits, total, max_score.map(f64::from), shards, vec![]);
        if let Some(aggs) = aggs {
            let (_, results) = index.aggregate(&matches, &aggs)?;
            out["aggregations"] = crate::aggs::render(&results, &aggs, &[&schema]);
        }
        out["took"] = json!(t0.elapsed().as_millis() as u64);
        Ok(out)
    }
}

/// The query a request asks for: its body's `query`, else the URL's `q` (with `df`) as a `query_string`.
pub(crate) fn request_query(body: Option<&Value>, params: &HashMap<String, String>) -> Option<Value> {
    match (body, params.get("q")) {
        (Some(q), _) => Some(q.clone()),
        (None, Some(q)) => {
            let mut qs = json!({"query": q});
            if let Some(df) = params.get("df") {
                qs["default_field"] = json!(df);
            }
            Some(json!({"query_string": qs}))
        }
        (None, None) => None,
    }
}

/// The order of two hits of different indices in a multi-target search: by score (descending), or by
/// their `sort` values key by key — a missing value (null) first or last as its key says, whatever the
/// direction, as Elasticsearch places them.
pub(crate) fn merge_order(sort: &SortSpec, keys: &[KeySpec], a: &Value, b: &Value) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    if *sort == SortSpec::Score {
        let score = |h: &Value| h["_score"].as_f64().unwrap_or(f64::NEG_INFINITY);
        return score(b).total_cmp(&score(a));
    }
    for (i, k) in keys.iter().enumerate() {
        let (x, y) = (&a["sort"][i], &b["sort"][i]);
        let o = match (x.is_null(), y.is_null()) {
            (true, true) => Ordering::Equal,
            (true, false) => {
                if k.missing_first {
                    Ordering::Less
                } else {
                    Ordering::Greater
                }
            }
            (false, true) => {
                if k.missing_first {
                    Ordering::Greater
                } else {
                    Ordering::Less
                }
            }
            _ => {
                let o = match (x.as_f64(), y.as_f64()) {
                    (Some(x), Some(y)) => x.total_cmp(&y),
                    _ => x.as_str().unwrap_or("").cmp(y.as_str().unwrap_or("")),
                };
                if k.descending {
                    o.reverse()
                } else {
                    o
                }
            }
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// The collapse key of field `name`: a keyword, numeric or date field, as Elasticsearch collapses on.
fn collapse_key(index: &Index, schema: &Schema, name: &str) -> ApiResult<SortKey> {
    match schema.field_id(name).map(|f| schema.field(f).ty) {
        None => Err(ApiError::bad_request(format!("no mapping found for [{name}] in order to collapse on"))),
        Some(FieldType::Text) => Err(ApiError::bad_request(format!(
            "cannot collapse on field [{name}] of type [text]: only keyword, numeric and date fields can be collapsed on"
        ))),
        Some(_) => Ok(index.sort_field(name, false, false)?),
    }
}

/// The hits of several indices' pages (each with its index's position) in one list in the request's order:
/// by `merge_order`, ties by index, then each page's own order. Each hit keeps its index's position.
pub(crate) fn merge_pages(
    sort: &SortSpec,
    keys: &[KeySpec],
    pages: Vec<(usize, Vec<Value>)>,
) -> Vec<(Value, usize)> {
    let mut hits: Vec<(Value, usize, usize)> = pages
        .into_iter()
        .flat_map(|(rank, page)| page.into_iter().enumerate().map(move |(at, hit)| (hit, rank, at)))
        .collect();
    hits.sort_by(|a, b| merge_order(sort, keys, &a.0, &b.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    hits.into_iter().map(|(hit, rank, _)| (hit, rank)).collect()
}

/// A page's hits, taken out of a response of [`SearchRequest::execute_page`].
pub(crate) fn take_hits(response: &mut Value) -> Vec<Value> {
    match response["hits"]["hits"].take() {
        Value::Array(hits) => hits,
        _ => vec![],
    }
}

/// A search response: the page of `hits`, their `total` (if counted), `max_score`, and `_shards` of which
/// `failures` (one object per failed shard) failed.
pub(crate) fn response(
    hits: Vec<Value>,
    total: Option<Value>,
    max_score: Option<f64>,
    shards: usize,
    failures: Vec<Value>,
) -> Value {
    let mut hits_obj = Map::new();
    if let Some(t) = total {
        hits_obj.insert("total".into(), t);
    }
    hits_obj.insert("max_score".into(), json!(max_score));
    hits_obj.insert("hits".into(), Value::Array(hits));
    let failed = failures.len();
    let mut shards_obj =
        json!({"total": shards, "successful": shards - failed, "skipped": 0, "failed": failed});
    if failed > 0 {
        shards_obj["failures"] = Value::Array(failures);
    }
    json!({"took": 0, "timed_out": false, "_shards": shards_obj, "hits": hits_obj})
}

/// The best `_score` among `hits` (`None` when none has one).
pub(crate) fn max_score(hits: &[Value]) -> Option<f64> {
    hits.iter().filter_map(|h| h["_score"].as_f64()).reduce(f64::max)
}

/// `sort` values as a request gives them (`search_after`) or a hit shows them: numbers for numeric keys,
/// strings for keyword keys (the engine checks each fits its key), null for a missing value.
pub(crate) fn sort_values(values: &[Value]) -> ApiResult<Vec<Option<SortValue>>> {
    let one = |v: &Value| match v {
        Value::Null => Ok(None),
        Value::Number(n) => Ok(n.as_f64().map(SortValue::Number)),
        Value::String(t) => Ok(Some(SortValue::Text(t.clone()))),
        other => Err(ApiError::parsing(format!(
            "[search_after] values must be numbers, strings or null, got [{other}]"
        ))),
    };
    values.iter().map(one).collect()
}

fn relation(exact: bool) -> &'static str {
    if exact {
        "eq"
    } else {
        "gte"
    }
}

/// `sort`: by score (the default), newest first (`_doc` descending; spirit's doc ids grow with time), or by a
/// numeric or date field (ascending by default, as in Elasticsearch). One sort key.
/// A sort value as Elasticsearch prints it: whole numbers as integers, `null` for a missing value.
fn sort_value(v: Option<&SortValue>) -> Value {
    match v {
        // -0.0 stays a double: it sorts before 0, and a cursor read back from `0` would skip past it.
        Some(&SortValue::Number(v))
            if v.fract() == 0.0 && v.abs() < 9.0e15 && !(v == 0.0 && v.is_sign_negative()) =>
        {
            json!(v as i64)
        }
        Some(SortValue::Number(v)) => json!(v),
        Some(SortValue::Text(t)) => json!(t),
        None => Value::Null,
    }
}

fn parse_sort(v: &Value) -> ApiResult<SortSpec> {
    let items: Vec<&Value> = match v {
        Value::Array(a) => a.iter().collect(),
        one => vec![one],
    };
    let mut keys = vec![];
    for item in items {
        let (name, order, missing) = match item {
            Value::String(s) => match s.split_once(':') {
                Some((k, o)) => (k.to_string(), Some(o.to_string()), None),
                None => (s.clone(), None, None),
            },
            Value::Object(m) if m.len() == 1 => {
                let (k, o) = m.iter().next().expect("one key");
                let (order, missing) = match o {
                    Value::String(s) => (Some(s.clone()), None),
                    Value::Object(p) => {
                        if let Some(bad) =
                            p.keys().find(|k| !["order", "unmapped_type", "missing"].contains(&k.as_str()))
                        {
                            return Err(ApiError::unsupported(format!("the sort option [{bad}]")));
                        }
                        (
                            p.get("order").and_then(Value::as_str).map(str::to_string),
                            p.get("missing").cloned(),
                        )
                    }
                    _ => return Err(ApiError::parsing(format!("malformed sort on [{k}]"))),
                };
                (k.clone(), order, missing)
            }
            _ => return Err(ApiError::parsing("malformed [sort]")),
        };
        let descending = match order.as_deref() {
            // `_score` sorts best first unless asked otherwise; everything else ascending.
            None => name == "_score",
            Some("desc") => true,
            Some("asc") => false,
            Some(o) => return Err(ApiError::parsing(format!("sort order must be asc or desc, found [{o}]"))),
        };
        let missing_first = match missing.as_ref().map(|m| m.as_str()) {
            None | Some(Some("_last")) => false,
            Some(Some("_first")) => true,
            Some(_) => {
                return Err(ApiError::unsupported(format!(
                    "[missing] values other than _first and _last (sorting on [{name}])"
                )))
            }
        };
        keys.push(KeySpec { name, descending, missing_first });
    }
    Ok(match keys.as_slice() {
        [] => SortSpec::Score,
        [k] if k.name == "_score" && k.descending => SortSpec::Score,
        [k] if k.name == "_doc" && k.descending => SortSpec::Newest,
        [k] if k.name != "_score" && k.name != "_doc" && !k.missing_first => {
            SortSpec::Field { name: k.name.clone(), descending: k.descending }
        }
        _ => SortSpec::Keys(keys),
    })
}

/// A request body that may be empty (`{}` then), as the search-like endpoints take it.
pub fn json_or_empty(body: &[u8]) -> ApiResult<Value> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::parsing(format!("request body is not valid JSON: {e}")))
}

/// `q` filtered by an alias's `filter` (query DSL, translated by `tr`): what a search through the alias runs.
/// The filter scores nothing, as a `bool` query's `filter` clause.
pub fn filtered(q: Query, filter: Option<&Value>, tr: &mut Translator) -> ApiResult<Query> {
    Ok(match filter {
        None => q,
        Some(f) => {
            Query::Bool { must: vec![q], should: vec![], must_not: vec![], filter: vec![tr.query(f)?] }
        }
    })
}

/// `_count`: the number of live documents matching the query.
pub fn count(
    targets: &[Target],
    body: &[u8],
    params: &HashMap<String, String>,
    limits: &Limits,
) -> ApiResult<Value> {
    let body = json_or_empty(body)?;
    let obj = body.as_object().ok_or_else(|| ApiError::parsing("request body must be a JSON object"))?;
    if let Some(k) = obj.keys().find(|k| k.as_str() != "query") {
        return Err(ApiError::parsing(format!("unknown key [{k}] in the count request")));
    }
    let mut p = params.clone();
    p.remove("size");
    p.remove("from");
    let mut req = SearchRequest::parse(&serde_json::to_vec(&body).expect("json"), &p, limits)?;
    req.size = 0;
    req.track = TrackTotal::Exact;
    let r = req.execute_on(targets, limits)?;
    let shards = &r["_shards"]["total"];
    Ok(json!({"count": r["hits"]["total"]["value"],
               "_shards": {"total": shards, "successful": shards, "skipped": 0, "failed": 0}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_filtering() {
        let src = json!({"title": "t", "body": "b", "meta": {"a": 1, "b": 2}});
        let f = SourceFilter::parse(&json!(["title", "meta.a"])).unwrap();
        assert_eq!(f.apply(src.clone()), Some(json!({"title": "t", "meta": {"a": 1}})));
        let f = SourceFilter::parse(&json!({"excludes": ["meta.*"]})).unwrap();
        assert_eq!(f.apply(src.clone()), Some(json!({"title": "t", "body": "b", "meta": {}})));
        let f = SourceFilter::parse(&json!({"includes": ["meta"], "excludes": ["meta.b"]})).unwrap();
        assert_eq!(f.apply(src.clone()), Some(json!({"meta": {"a": 1}})));
        assert_eq!(SourceFilter::parse(&json!(false)).unwrap().apply(src.clone()), None);
        assert_eq!(SourceFilter::parse(&json!("t*")).unwrap().apply(src), Some(json!({"title": "t"})));
    }

    #[test]
    fn sorts() {
        assert_eq!(parse_sort(&json!(["_score"])).unwrap(), SortSpec::Score);
        assert_eq!(parse_sort(&json!([{"_score": {"order": "desc"}}])).unwrap(), SortSpec::Score);
        assert_eq!(parse_sort(&json!({"_doc": "desc"})).unwrap(), SortSpec::Newest);
        assert_eq!(parse_sort(&json!("_doc:desc")).unwrap(), SortSpec::Newest);
        assert_eq!(
            parse_sort(&json!([{"price": "desc"}])).unwrap(),
            SortSpec::Field { name: "price".into(), descending: true }
        );
        assert_eq!(
            parse_sort(&json!(["year"])).unwrap(),
            SortSpec::Field { name: "year".into(), descending: false }
        );
        assert!(parse_sort(&json!([{"price": {"order": "asc", "mode": "min"}}]))
            .unwrap_err()
            .reason
            .contains("mode"));
        let key =
            |name: &str, descending, missing_first| KeySpec { name: name.into(), descending, missing_first };
        assert_eq!(
            parse_sort(&json!(["a", {"b": {"order": "desc", "missing": "_first"}}, "_score"])).unwrap(),
            SortSpec::Keys(vec![key("a", false, false), key("b", true, true), key("_score", true, false)])
        );
        assert_eq!(
            parse_sort(&json!({"_doc": "asc"})).unwrap(),
            SortSpec::Keys(vec![key("_doc", false, false)])
        );
        assert_eq!(
            parse_sort(&json!({"_score": "asc"})).unwrap(),
            SortSpec::Keys(vec![key("_score", false, false)])
        );
        assert!(parse_sort(&json!([{"price": {"missing": 0}}])).unwrap_err().reason.contains("missing"));
    }

    #[test]
    fn window_and_unknown_keys() {
        let l = Limits::default();
        let p = HashMap::new();
        assert!(SearchRequest::parse(br#"{"from": 9995, "size": 10}"#, &p, &l)
            .unwrap_err()
            .reason
            .contains("Result window"));
        assert!(SearchRequest::parse(br#"{"aggs": {}}"#, &p, &l).is_ok());
        assert!(SearchRequest::parse(br#"{"aggs": {}, "aggregations": {}}"#, &p, &l)
            .unwrap_err()
            .reason
            .contains("both"));
        assert!(SearchRequest::parse(br#"{"agg": {}}"#, &p, &l)
            .unwrap_err()
            .reason
            .contains("unknown key [agg]"));
        assert!(SearchRequest::parse(br#"{"query": "#, &p, &l).is_err());
        assert!(SearchRequest::parse(b"", &p, &l).is_ok());
    }
}
