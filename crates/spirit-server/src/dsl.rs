//! The Elasticsearch query DSL, translated into spirit's query AST ([`spirit::Query`]).
//!
//! Supported: `match_all`, `match_none`, `match` (`operator`), `match_phrase` (`slop`), `multi_match`
//! (`best_fields`, `most_fields`, `phrase` with `slop`, `phrase_prefix`, `bool_prefix`; scored as the sum over fields), `term`, `terms` (constant score,
//! as in Elasticsearch), `exists`, `constant_score`, `dis_max` (`tie_breaker` from 0 to 1), `range`
//! (`gt`/`gte`/`lt`/`lte`), `prefix`, `wildcard` (`*` and `?`; `value` or `wildcard`, `case_insensitive`),
//! `regexp` (Lucene's syntax; `flags`, `case_insensitive`; complement, intersection and intervals refused),
//! `match_bool_prefix` (the last token a prefix), `match_phrase_prefix` (`max_expansions`, `slop`), `bool` (`must`, `should`, `must_not`, `filter`,
//! `minimum_should_match`: a count, negative count, percentage, negative percentage or conditions, on `bool` and on
//! `match`) and `query_string` (spirit's Lucene-style syntax, `^` boosts included) — the `match` family,
//! `multi_match` and `query_string` with `analyzer` (a built-in one, or one the index defines: see
//! [`Translator::on_index`]), which becomes a [`Query::Analyzed`] around the clause — each
//! with Elasticsearch's `boost` parameter (and `multi_match`'s per-field `"title^3"`): the clause's score
//! times the boost ([`Query::Boost`]); a negative or non-numeric boost is a 400. Anything else — another
//! clause, fuzziness — is refused with a 400 that names it, never ignored, so an answer is never
//! silently different from what was asked.
//!
//! Limits: at most [`Limits::max_clauses`](crate::Limits) leaf clauses and a nesting depth of
//! [`Limits::max_depth`](crate::Limits) (Elasticsearch's `indices.query.bool.max_clause_count` guards the
//! same thing).

use crate::error::{ApiError, ApiResult};
use serde_json::{Map, Value};
use spirit::analysis::AnalyzerConfig;
use spirit::query::{FuzzyOptions, RegexpFlags, MAX_PREFIX_EXPANSION as MAX_EXPANSIONS};
use spirit::schema::{FieldType, Schema};
use spirit::Query;
use std::ops::Bound;

/// Translates one query object.
pub struct Translator<'a> {
    schema: &'a Schema,
    /// The index's settings, for the analyzers it defines (a query's `analyzer` may name one).
    settings: Option<&'a spirit::IndexSettings>,
    max_clauses: usize,
    max_depth: usize,
    clauses: usize,
    /// The analyzer the clause being translated asks for (its `analyzer` parameter), if any.
    over: Option<AnalyzerConfig>,
}

impl<'a> Translator<'a> {
    pub fn new(schema: &'a Schema, max_clauses: usize, max_depth: usize) -> Translator<'a> {
        Translator { schema, settings: None, max_clauses, max_depth, clauses: 0, over: None }
    }

    /// The translator of queries on the index of `settings`, whose analyzers a query's `analyzer` may name.
    pub fn on_index(mut self, settings: &'a spirit::IndexSettings) -> Translator<'a> {
        self.settings = Some(settings);
        self
    }

    /// `build`'s query with its text analyzed by the analyzer a clause of kind `kind` names in its
    /// `analyzer` parameter ([`Query::Analyzed`]), if it names one; `build` sees it in `self.over` (the
    /// places that analyze text while translating read it there).
    fn analyzed_by(
        &mut self,
        kind: &str,
        params: &Map<String, Value>,
        build: impl FnOnce(&mut Self) -> ApiResult<Query>,
    ) -> ApiResult<Query> {
        let over = match params.get("analyzer") {
            None | Some(Value::Null) => None,
            Some(Value::String(name)) => Some(crate::indices::analyzer_in(self.settings, name)?),
            Some(_) => return Err(ApiError::parsing(format!("[{kind}] [analyzer] must be a string"))),
        };
        let outer = self.over;
        self.over = over.or(outer);
        let q = build(self);
        self.over = outer;
        Ok(match over {
            Some(analyzer) => Query::Analyzed { analyzer, query: Box::new(q?) },
            None => q?,
        })
    }

    /// How deep a request may nest (queries, and aggregations).
    pub fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Translates `{"<kind>": {...}}`.
    pub fn query(&mut self, v: &Value) -> ApiResult<Query> {
        self.q(v, 0)
    }

    fn leaf(&mut self) -> ApiResult<()> {
        self.clauses += 1;
        if self.clauses > self.max_clauses {
            return Err(ApiError::new(
                axum::http::StatusCode::BAD_REQUEST,
                "too_many_clauses",
                format!("query has more than {} clauses (the limit)", self.max_clauses),
            ));
        }
        Ok(())
    }

    fn q(&mut self, v: &Value, depth: usize) -> ApiResult<Query> {
        if depth > self.max_depth {
            return Err(ApiError::parsing(format!(
                "query nests deeper than {} levels (the limit)",
                self.max_depth
            )));
        }
        let obj = v.as_object().ok_or_else(|| ApiError::parsing("a query must be a JSON object"))?;
        if obj.len() != 1 {
            return Err(ApiError::parsing(format!(
                "a query object must have exactly one key (the query kind), found {}",
                obj.len()
            )));
        }
        let (kind, body) = obj.iter().next().expect("one key");
        match kind.as_str() {
            "match_all" => {
                check_keys(kind, body, &["boost"])?;
                self.leaf()?;
                boosted(Query::MatchAll, body)
            }
            "match_none" => {
                self.leaf()?;
                Ok(Query::bool())
            }
            "match" => {
                let (field, params) = single_field(kind, body, "query")?;
                check_keys(
                    kind,
                    &params,
                    &[
                        "query",
                        "operator",
                        "boost",
                        "analyzer",
                        "zero_terms_query",
                        "minimum_should_match",
                        "fuzziness",
                        "prefix_length",
                        "max_expansions",
                        "fuzzy_transpositions",
                    ],
                )?;
                let text = scalar_text(kind, params.get("query"))?;
                let and = operator_is_and(kind, &params)?;
                let fuzzy = fuzzy_options(kind, &params, "fuzzy_transpositions")?;
                let q = self.analyzed_by(kind, &params, |tr| {
                    let q = match fuzzy {
                        Some(options) => tr.fuzzy_match(Some(field), &text, and, options)?,
                        None => tr.match_field(Some(field), &text, and)?,
                    };
                    with_minimum_should_match(q, params.get("minimum_should_match"))
                })?;
                boosted(q, &params)
            }
            "match_bool_prefix" => {
                let (field, params) = single_field(kind, body, "query")?;
                check_keys(
                    kind,
                    &params,
                    &["query", "operator", "boost", "analyzer", "minimum_should_match"],
                )?;
                let text = scalar_text(kind, params.get("query"))?;
                let and = operator_is_and(kind, &params)?;
                let q = self.analyzed_by(kind, &params, |tr| {
                    let q = tr.bool_prefix(field, &text, and)?;
                    with_minimum_should_match(q, params.get("minimum_should_match"))
                })?;
                boosted(q, &params)
            }
            "match_phrase" => {
                let (field, params) = single_field(kind, body, "query")?;
                check_keys(kind, &params, &["query", "slop", "boost", "analyzer"])?;
                let slop = slop(kind, "slop", params.get("slop"))?;
                self.leaf()?;
                let text = scalar_text(kind, params.get("query"))?;
                let q = self
                    .analyzed_by(kind, &params, |_| Ok(Query::Phrase { field: Some(field), text, slop }))?;
                boosted(q, &params)
            }
            "match_phrase_prefix" => {
                let (field, params) = single_field(kind, body, "query")?;
                check_keys(kind, &params, &["query", "slop", "max_expansions", "boost", "analyzer"])?;
                let slop = slop(kind, "slop", params.get("slop"))?;
                let max_expansions = prefix_expansions(kind, params.get("max_expansions"))?;
                self.leaf()?;
                let text = scalar_text(kind, params.get("query"))?;
                let q = self.analyzed_by(kind, &params, |_| {
                    Ok(Query::PhrasePrefix { field: Some(field), text, max_expansions, slop })
                })?;
                boosted(q, &params)
            }
            "multi_match" => self.multi_match(body),
            "term" => {
                let (field, params) = single_field(kind, body, "value")?;
                check_keys(kind, &params, &["value", "boost", "case_insensitive"])?;
                if params.get("case_insensitive").and_then(Value::as_bool) == Some(true) {
                    return Err(ApiError::unsupported("[term] with [case_insensitive]"));
                }
                let value = params.get("value").ok_or_else(|| ApiError::parsing("[term] needs a [value]"))?;
                boosted(self.term(field, value)?, &params)
            }
            "terms" => {
                let obj = body.as_object().ok_or_else(|| ApiError::parsing("[terms] needs an object"))?;
                let mut fields = obj.iter().filter(|(k, _)| k.as_str() != "boost");
                let (field, values) =
                    fields.next().ok_or_else(|| ApiError::parsing("[terms] needs a field"))?;
                if fields.next().is_some() {
                    return Err(ApiError::parsing("[terms] takes one field"));
                }
                let values = values.as_array().ok_or_else(|| {
                    ApiError::parsing(format!("[terms] on [{field}] needs an array of values"))
                })?;
                let mut should = vec![];
                for v in values {
                    should.push(self.term(field.clone(), v)?);
                }
                // A constant-score query in Elasticsearch: every match scores its boost (1 without one).
                let any = Query::Bool { must: vec![], should, must_not: vec![], filter: vec![] };
                Ok(Query::ConstantScore { query: Box::new(any), score: boost_value(body)?.unwrap_or(1.0) })
            }
            "ids" => {
                check_keys(kind, body, &["values", "boost"])?;
                let values = body
                    .get("values")
                    .and_then(Value::as_array)
                    .ok_or_else(|| ApiError::parsing("[ids] needs an array of [values]"))?;
                let values =
                    values.iter().map(|v| scalar_text(kind, Some(v))).collect::<ApiResult<Vec<String>>>()?;
                self.leaf()?;
                boosted(Query::Ids { values }, body)
            }
            "exists" => {
                check_keys(kind, body, &["field", "boost"])?;
                let field = scalar_text(kind, body.get("field"))?;
                self.leaf()?;
                // The empty prefix: any term or value in the field (`field:*`).
                boosted(Query::Prefix { field: Some(field), prefix: String::new() }, body)
            }
            "constant_score" => {
                check_keys(kind, body, &["filter", "boost"])?;
                let inner = body
                    .get("filter")
                    .ok_or_else(|| ApiError::parsing("[constant_score] needs a [filter]"))?;
                let query = Box::new(self.q(inner, depth + 1)?);
                Ok(Query::ConstantScore { query, score: boost_value(body)?.unwrap_or(1.0) })
            }
            "dis_max" => {
                check_keys(kind, body, &["queries", "tie_breaker", "boost"])?;
                let tie_breaker = match body.get("tie_breaker") {
                    None | Some(Value::Null) => Some(0.0),
                    Some(Value::Number(n)) => n.as_f64(),
                    Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
                    Some(_) => None,
                }
                .filter(|t| (0.0..=1.0).contains(t))
                .ok_or_else(|| ApiError::parsing("[dis_max] [tie_breaker] must be a number from 0 to 1"))?
                    as f32;
                let of = match body.get("queries") {
                    Some(Value::Array(qs)) if !qs.is_empty() => {
                        qs.iter().map(|q| self.q(q, depth + 1)).collect::<ApiResult<Vec<_>>>()?
                    }
                    _ => return Err(ApiError::parsing("[dis_max] needs a non-empty array of [queries]")),
                };
                boosted(Query::DisMax { of, tie_breaker }, body)
            }
            "range" => {
                let (field, params) = single_field(kind, body, "")?;
                check_keys(kind, &params, &["gt", "gte", "lt", "lte", "boost", "format"])?;
                let bound = |inc: &str, exc: &str| -> ApiResult<Bound<String>> {
                    match (params.get(inc), params.get(exc)) {
                        (Some(_), Some(_)) => {
                            Err(ApiError::parsing(format!("[range] has both [{inc}] and [{exc}]")))
                        }
                        (Some(v), None) if !v.is_null() => Ok(Bound::Included(scalar_text(kind, Some(v))?)),
                        (None, Some(v)) if !v.is_null() => Ok(Bound::Excluded(scalar_text(kind, Some(v))?)),
                        _ => Ok(Bound::Unbounded),
                    }
                };
                let lower = bound("gte", "gt")?;
                let upper = bound("lte", "lt")?;
                self.leaf()?;
                boosted(Query::Range { field, lower, upper }, &params)
            }
            "fuzzy" => {
                let (field, params) = single_field(kind, body, "value")?;
                check_keys(
                    kind,
                    &params,
                    &[
                        "value",
                        "fuzziness",
                        "prefix_length",
                        "max_expansions",
                        "transpositions",
                        "boost",
                        "rewrite",
                    ],
                )?;
                self.leaf()?;
                let text = scalar_text(kind, params.get("value"))?;
                let options = fuzzy_options(kind, &params, "transpositions")?.unwrap_or_default();
                boosted(Query::Fuzzy { field: Some(field), text, options, analyzed: false }, &params)
            }
            "prefix" => {
                let (field, params) = single_field(kind, body, "value")?;
                check_keys(kind, &params, &["value", "boost", "rewrite"])?;
                self.leaf()?;
                let prefix = scalar_text(kind, params.get("value"))?;
                boosted(Query::Prefix { field: Some(field), prefix }, &params)
            }
            "wildcard" => {
                let (field, params) = single_field(kind, body, "value")?;
                check_keys(kind, &params, &["value", "wildcard", "boost", "rewrite", "case_insensitive"])?;
                self.leaf()?;
                let pattern = match (params.get("value"), params.get("wildcard")) {
                    (Some(_), Some(_)) => {
                        return Err(ApiError::parsing("[wildcard] takes [value] or [wildcard], not both"))
                    }
                    (v, w) => scalar_text(kind, v.or(w))?,
                };
                let case_insensitive = bool_param(kind, &params, "case_insensitive")?;
                boosted(Query::Wildcard { field: Some(field), pattern, case_insensitive }, &params)
            }
            "regexp" => {
                let (field, params) = single_field(kind, body, "value")?;
                let keys =
                    ["value", "flags", "case_insensitive", "max_determinized_states", "rewrite", "boost"];
                check_keys(kind, &params, &keys)?;
                self.leaf()?;
                let pattern = scalar_text(kind, params.get("value"))?;
                let flags = match params.get("flags") {
                    None => RegexpFlags::ALL,
                    Some(Value::String(f)) => RegexpFlags::parse(f).map_err(ApiError::parsing)?,
                    Some(_) => {
                        return Err(ApiError::parsing(
                            "[regexp] [flags] must be a string of flags joined by '|', as in \"INTERSECTION|EMPTY\"",
                        ))
                    }
                };
                // A cap on the work of determinizing Lucene's automaton: the regex crate compiles to a lazy
                // DFA under its own size limit instead, so the value is only checked.
                if let Some(v) = params.get("max_determinized_states") {
                    if v.as_u64().is_none_or(|n| n == 0) {
                        return Err(ApiError::parsing(
                            "[regexp] [max_determinized_states] must be a whole number of at least 1",
                        ));
                    }
                }
                let case_insensitive = bool_param(kind, &params, "case_insensitive")?;
                boosted(Query::Regexp { field: Some(field), pattern, flags, case_insensitive }, &params)
            }
            "bool" => self.bool(body, depth),
            "query_string" => {
                let params =
                    body.as_object().ok_or_else(|| ApiError::parsing("[query_string] needs an object"))?;
                check_keys(
                    kind,
                    body,
                    &[
                        "query",
                        "default_field",
                        "fields",
                        "default_operator",
                        "boost",
                        "phrase_slop",
                        "analyzer",
                    ],
                )?;
                let opts = spirit::query::ParseOptions {
                    phrase_slop: slop(kind, "phrase_slop", params.get("phrase_slop"))?,
                };
                let text = scalar_text(kind, params.get("query"))?;
                if let Some(op) = params.get("default_operator").and_then(Value::as_str) {
                    if !op.eq_ignore_ascii_case("or") {
                        return Err(ApiError::unsupported(
                            "[query_string] with [default_operator] AND (use +term)",
                        ));
                    }
                }
                let field = match (params.get("default_field"), params.get("fields")) {
                    (Some(f), None) => Some(scalar_text(kind, Some(f))?),
                    (None, Some(Value::Array(fs))) if fs.len() == 1 => Some(scalar_text(kind, fs.first())?),
                    (None, Some(_)) => {
                        return Err(ApiError::unsupported(
                            "[query_string] over several [fields] (use field:term)",
                        ))
                    }
                    (None, None) => None,
                    (Some(_), Some(_)) => {
                        return Err(ApiError::parsing(
                            "[query_string] takes [default_field] or [fields], not both",
                        ))
                    }
                };
                let mut q = spirit::query::parse_with(&text, &opts).map_err(|e| {
                    ApiError::new(
                        axum::http::StatusCode::BAD_REQUEST,
                        "query_shard_exception",
                        format!("failed to parse query [{text}]: {e}"),
                    )
                })?;
                if let Some(f) = field.filter(|f| f != "*") {
                    set_default_field(&mut q, &f);
                }
                self.count_leaves(&q)?;
                let q = self.analyzed_by(kind, params, |_| Ok(q))?;
                boosted(q, body)
            }
            other => Err(ApiError::parsing(format!("unknown query [{other}]"))),
        }
    }

    fn count_leaves(&mut self, q: &Query) -> ApiResult<()> {
        match q {
            Query::Bool { must, should, must_not, filter } => {
                for c in must.iter().chain(should).chain(must_not).chain(filter) {
                    self.count_leaves(c)?;
                }
                Ok(())
            }
            Query::Boost { query, .. }
            | Query::ConstantScore { query, .. }
            | Query::Analyzed { query, .. } => self.count_leaves(query),
            Query::AtLeast { of, .. } | Query::DisMax { of, .. } => {
                of.iter().try_for_each(|c| self.count_leaves(c))
            }
            _ => self.leaf(),
        }
    }

    /// Whether a field of type `ty` matches a `match`-like clause's whole text as one value: keyword and
    /// numeric fields do, as in Elasticsearch — unless the clause names an analyzer, which then replaces a
    /// keyword field's too, whose terms are its tokens.
    fn whole_value(&self, ty: FieldType) -> bool {
        ty != FieldType::Text && !(ty == FieldType::Keyword && self.over.is_some())
    }

    /// `match` on one field (or the default fields when `None`).
    fn match_field(&mut self, field: Option<String>, text: &str, and: bool) -> ApiResult<Query> {
        if let Some(ty) = field.as_deref().and_then(|f| self.field_type(f)) {
            if self.whole_value(ty) {
                return self.term(field.expect("typed field"), &Value::String(text.to_string()));
            }
        }
        let mut tokens = vec![];
        spirit::analysis::tokenize(text, &mut |t| tokens.push(t.to_string()));
        let mut terms = vec![];
        for t in tokens {
            self.leaf()?;
            terms.push(Query::Term { field: field.clone(), text: t });
        }
        Ok(match terms.len() {
            1 => terms.pop().expect("one term"),
            _ if and => Query::Bool { must: terms, should: vec![], must_not: vec![], filter: vec![] },
            _ => Query::Bool { must: vec![], should: terms, must_not: vec![], filter: vec![] },
        })
    }

    /// `match_bool_prefix`: the text's tokens as `match` takes them, but the last one analysis keeps becomes a
    /// prefix query of its analyzed form (Elasticsearch analyzes the text and makes its last token the
    /// prefix: stemmed, and stop words after it dropped); a keyword field's whole value is one prefix, unless
    /// the query names an analyzer, whose tokens it then takes (as `match_field`).
    fn bool_prefix(&mut self, field: String, text: &str, and: bool) -> ApiResult<Query> {
        let id = self.schema.field_id(&field);
        let ty = id.map(|id| self.schema.field(id).ty);
        if ty.is_some_and(|ty| self.whole_value(ty)) {
            self.leaf()?;
            return Ok(Query::Prefix { field: Some(field), prefix: text.to_string() });
        }
        let mut raw = vec![];
        spirit::analysis::tokenize(text, &mut |t| raw.push(t.to_string()));
        // The last token analysis keeps, analyzed (one token in, at most one term out).
        let over = self.over.map(spirit::analysis::Analyzer::new);
        let analyzed = |t: &str| match (&over, id) {
            (Some(a), _) => a.analyze_to_vec(t).into_iter().next().map(|x| x.0),
            (None, Some(id)) => {
                self.schema.search_analyzer(id).analyze_to_vec(t).into_iter().next().map(|x| x.0)
            }
            (None, None) => Some(t.to_string()),
        };
        let last = raw.iter().enumerate().rev().find_map(|(i, t)| analyzed(t).map(|p| (i, p)));
        let mut clauses = vec![];
        if let Some((i, prefix)) = last {
            for t in &raw[..i] {
                self.leaf()?;
                clauses.push(Query::Term { field: Some(field.clone()), text: t.clone() });
            }
            self.leaf()?;
            clauses.push(Query::Prefix { field: Some(field), prefix });
        }
        Ok(match clauses.len() {
            1 => clauses.pop().expect("one clause"),
            _ if and => Query::Bool { must: clauses, should: vec![], must_not: vec![], filter: vec![] },
            _ => Query::Bool { must: vec![], should: clauses, must_not: vec![], filter: vec![] },
        })
    }

    /// `match` with `fuzziness`: each token of the text a fuzzy term (analyzed as `match` analyzes it); a
    /// keyword field's whole value one fuzzy term.
    fn fuzzy_match(
        &mut self,
        field: Option<String>,
        text: &str,
        and: bool,
        options: FuzzyOptions,
    ) -> ApiResult<Query> {
        // A keyword field's whole value is one term, unless the query names an analyzer (`whole_value`).
        let keyword = field.as_deref().and_then(|f| self.field_type(f)) == Some(FieldType::Keyword)
            && self.whole_value(FieldType::Keyword);
        let mut tokens = vec![];
        if keyword {
            tokens.push(text.to_string());
        } else {
            spirit::analysis::tokenize(text, &mut |t| tokens.push(t.to_string()));
        }
        let mut terms = vec![];
        for t in tokens {
            self.leaf()?;
            terms.push(Query::Fuzzy { field: field.clone(), text: t, options, analyzed: !keyword });
        }
        Ok(match terms.len() {
            1 => terms.pop().expect("one term"),
            _ if and => Query::Bool { must: terms, should: vec![], must_not: vec![], filter: vec![] },
            _ => Query::Bool { must: vec![], should: terms, must_not: vec![], filter: vec![] },
        })
    }

    fn multi_match(&mut self, body: &Value) -> ApiResult<Query> {
        let kind = "multi_match";
        check_keys(
            kind,
            body,
            &[
                "query",
                "fields",
                "type",
                "operator",
                "boost",
                "slop",
                "fuzziness",
                "prefix_length",
                "max_expansions",
                "fuzzy_transpositions",
                "analyzer",
            ],
        )?;
        let obj = body.as_object().ok_or_else(|| ApiError::parsing("[multi_match] needs an object"))?;
        self.analyzed_by(kind, obj, |tr| tr.multi_match_fields(body, obj))
    }

    /// [`Self::multi_match`] but for its `analyzer`.
    fn multi_match_fields(&mut self, body: &Value, obj: &Map<String, Value>) -> ApiResult<Query> {
        let kind = "multi_match";
        let fuzzy = fuzzy_options(kind, obj, "fuzzy_transpositions")?;
        let text = scalar_text(kind, body.get("query"))?;
        let and = operator_is_and(kind, body)?;
        let ty = body.get("type").and_then(Value::as_str).unwrap_or("best_fields");
        if !["best_fields", "most_fields", "phrase", "phrase_prefix", "bool_prefix"].contains(&ty) {
            return Err(ApiError::unsupported(format!("[multi_match] of type [{ty}]")));
        }
        let slop = slop(kind, "slop", body.get("slop"))?;
        if fuzzy.is_some() && ty.starts_with("phrase") {
            return Err(ApiError::bad_request(format!(
                "[multi_match] [fuzziness] is not allowed for type [{ty}]"
            )));
        }
        if slop > 0 && !ty.starts_with("phrase") {
            // Elasticsearch would ignore it: refused, so no one believes it applied.
            return Err(ApiError::unsupported(format!("[multi_match] [slop] with type [{ty}]")));
        }
        // For phrase_prefix, how many terms the last token expands to (for the other types it belongs to
        // fuzziness, read with it).
        let max_expansions =
            prefix_expansions(kind, body.get("max_expansions").filter(|_| ty == "phrase_prefix"))?;
        // Each field with its boost (`"title^3"`; 1 without one).
        let field = |f: &str| -> ApiResult<(Option<String>, f32)> {
            let (name, boost) = match f.split_once('^') {
                Some((name, b)) => (name, b.parse::<f32>().map_err(|_| bad_boost(&format!("[{f}]")))?),
                None => (f, 1.0),
            };
            Ok(((name != "*").then(|| name.to_string()), boost))
        };
        let fields: Vec<(Option<String>, f32)> = match body.get("fields") {
            None => vec![(None, 1.0)],
            Some(Value::Array(fs)) => fs
                .iter()
                .map(|f| {
                    field(
                        f.as_str()
                            .ok_or_else(|| ApiError::parsing("[multi_match] fields must be strings"))?,
                    )
                })
                .collect::<ApiResult<_>>()?,
            Some(Value::String(f)) => vec![field(f)?],
            Some(_) => return Err(ApiError::parsing("[multi_match] fields must be an array of strings")),
        };
        let mut should = vec![];
        for (f, boost) in fields {
            let q = if ty == "phrase" {
                self.leaf()?;
                Query::Phrase { field: f, text: text.clone(), slop }
            } else if ty == "phrase_prefix" {
                self.leaf()?;
                Query::PhrasePrefix { field: f, text: text.clone(), max_expansions, slop }
            } else if ty == "bool_prefix" {
                let f = f.ok_or_else(|| {
                    ApiError::unsupported("[multi_match] of type [bool_prefix] without [fields] (name them)")
                })?;
                self.bool_prefix(f, &text, and)?
            } else if let Some(options) = fuzzy {
                self.fuzzy_match(f, &text, and, options)?
            } else {
                self.match_field(f, &text, and)?
            };
            should.push(q.boosted(boost).map_err(ApiError::parsing)?);
        }
        let q = if should.len() == 1 {
            should.pop().expect("one")
        } else {
            Query::Bool { must: vec![], should, must_not: vec![], filter: vec![] }
        };
        boosted(q, body)
    }

    /// An exact value: a term on keyword and text fields, an equality range on numeric and date fields.
    fn term(&mut self, field: String, value: &Value) -> ApiResult<Query> {
        let text = scalar_text("term", Some(value))?;
        self.leaf()?;
        Ok(match self.field_type(&field) {
            // `_id` is not a field: its terms are id lookups, scoring 1 as `ids` does.
            _ if field == "_id" => Query::Ids { values: vec![text] },
            Some(ty) if ty.is_numeric() => {
                Query::Range { field, lower: Bound::Included(text.clone()), upper: Bound::Included(text) }
            }
            _ => Query::Term { field: Some(field), text },
        })
    }

    fn bool(&mut self, body: &Value, depth: usize) -> ApiResult<Query> {
        check_keys("bool", body, &["must", "should", "must_not", "filter", "minimum_should_match", "boost"])?;
        let mut list = |key: &str| -> ApiResult<Vec<Query>> {
            match body.get(key) {
                None | Some(Value::Null) => Ok(vec![]),
                Some(Value::Array(items)) => items.iter().map(|c| self.q(c, depth + 1)).collect(),
                Some(one @ Value::Object(_)) => Ok(vec![self.q(one, depth + 1)?]),
                Some(_) => {
                    Err(ApiError::parsing(format!("[bool] [{key}] must be a query or an array of queries")))
                }
            }
        };
        let mut must = list("must")?;
        let should = list("should")?;
        let must_not = list("must_not")?;
        let filter = list("filter")?;
        let msm = match body.get("minimum_should_match") {
            None | Some(Value::Null) => None,
            Some(v) => Some(minimum_should_match(v, should.len())?),
        };
        let required_elsewhere = !must.is_empty() || !filter.is_empty();
        let should = match msm {
            // Without must or filter clauses one should clause is required anyway (0 is Lucene's default).
            None | Some(0) => should,
            Some(1) if required_elsewhere && !should.is_empty() => {
                // At least one should clause is then required: an inner disjunction joins the musts.
                must.push(Query::Bool { must: vec![], should, must_not: vec![], filter: vec![] });
                vec![]
            }
            Some(1) => should,
            Some(n) => {
                // At least n of them, summed as the should clauses would be: one must clause.
                must.push(Query::AtLeast { min: n, of: should });
                vec![]
            }
        };
        if must.is_empty() && should.is_empty() && filter.is_empty() {
            // Elasticsearch: an empty bool (or one with only must_not) matches every other document.
            if must_not.is_empty() {
                return boosted(Query::MatchAll, body);
            }
        }
        boosted(Query::Bool { must, should, must_not, filter }, body)
    }

    fn field_type(&self, name: &str) -> Option<FieldType> {
        self.schema.field_id(name).map(|id| self.schema.field(id).ty)
    }
}

/// A phrase's slop parameter `key` (`slop`, or `query_string`'s `phrase_slop`; 0 when absent): a whole
/// number of at least 0, as a JSON number or a string of digits (Elasticsearch takes both), at most
/// [`spirit::MAX_SLOP`].
fn slop(kind: &str, key: &str, slop: Option<&Value>) -> ApiResult<u32> {
    let n = match slop {
        None | Some(Value::Null) => return Ok(0),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse::<u64>().ok(),
        Some(_) => None,
    };
    n.filter(|&n| n <= spirit::MAX_SLOP as u64).map(|n| n as u32).ok_or_else(|| {
        ApiError::parsing(format!("[{kind}] [{key}] must be a whole number from 0 to {}", spirit::MAX_SLOP))
    })
}

/// A phrase prefix's `max_expansions`: 1 to [`MAX_EXPANSIONS`], 50 when absent (Elasticsearch's default).
fn prefix_expansions(kind: &str, v: Option<&Value>) -> ApiResult<usize> {
    let Some(v) = v else { return Ok(50) };
    v.as_u64().filter(|n| (1..=MAX_EXPANSIONS as u64).contains(n)).map(|n| n as usize).ok_or_else(|| {
        ApiError::parsing(format!(
            "[{kind}] [max_expansions] must be a whole number from 1 to {MAX_EXPANSIONS}"
        ))
    })
}

/// `params[key]`: a boolean, false when absent.
fn bool_param(kind: &str, params: &Map<String, Value>, key: &str) -> ApiResult<bool> {
    match params.get(key) {
        None => Ok(false),
        Some(v) => {
            v.as_bool().ok_or_else(|| ApiError::parsing(format!("[{kind}] [{key}] must be a boolean")))
        }
    }
}

/// Every term without a field in `q` searches `field` instead of the index's default fields.
fn set_default_field(q: &mut Query, field: &str) {
    match q {
        Query::Term { field: f @ None, .. }
        | Query::Phrase { field: f @ None, .. }
        | Query::Prefix { field: f @ None, .. }
        | Query::Wildcard { field: f @ None, .. }
        | Query::Regexp { field: f @ None, .. }
        | Query::Fuzzy { field: f @ None, .. } => *f = Some(field.to_string()),
        Query::Bool { must, should, must_not, filter } => {
            for c in must.iter_mut().chain(should).chain(must_not).chain(filter) {
                set_default_field(c, field);
            }
        }
        Query::Boost { query, .. } | Query::ConstantScore { query, .. } | Query::Analyzed { query, .. } => {
            set_default_field(query, field)
        }
        Query::AtLeast { of, .. } | Query::DisMax { of, .. } => {
            of.iter_mut().for_each(|c| set_default_field(c, field))
        }
        _ => {}
    }
}

/// `{"field": "text"}` or `{"field": {"<main>": "text", ...}}` → the field and its parameters (the short
/// form becomes `{"<main>": "text"}`).
fn single_field(kind: &str, body: &Value, main: &str) -> ApiResult<(String, Map<String, Value>)> {
    let obj = body.as_object().ok_or_else(|| ApiError::parsing(format!("[{kind}] needs an object")))?;
    let mut it = obj.iter();
    let (field, v) = it.next().ok_or_else(|| ApiError::parsing(format!("[{kind}] needs a field")))?;
    if it.next().is_some() {
        return Err(ApiError::parsing(format!(
            "[{kind}] query doesn't support multiple fields, found [{}]",
            obj.keys().cloned().collect::<Vec<_>>().join("], [")
        )));
    }
    let params = match v {
        Value::Object(m) => m.clone(),
        scalar if !main.is_empty() => {
            let mut m = Map::new();
            m.insert(main.to_string(), scalar.clone());
            m
        }
        _ => return Err(ApiError::parsing(format!("[{kind}] on [{field}] needs an object"))),
    };
    Ok((field.clone(), params))
}

/// The fuzzy options of a `match` (`fuzziness`, `prefix_length`, `max_expansions`, and `transpositions_key`)
/// or `fuzzy` query; `None` without `fuzziness` on a `match`. Fuzziness is `AUTO` (`AUTO:3,6`) or 0, 1, 2.
fn fuzzy_options(
    kind: &str,
    params: &serde_json::Map<String, Value>,
    transpositions_key: &str,
) -> ApiResult<Option<FuzzyOptions>> {
    let max_edits = match params.get("fuzziness") {
        None if kind != "fuzzy" => return Ok(None),
        None => None,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("auto") || s.eq_ignore_ascii_case("auto:3,6") => None,
        Some(Value::String(s)) if ["0", "1", "2"].contains(&s.as_str()) => s.parse().ok(),
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n <= 2) => n.as_u64().map(|n| n as u8),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "[{kind}] [fuzziness] must be AUTO, 0, 1 or 2 (other AUTO bounds are not supported), got [{other}]"
            )))
        }
    };
    let count = |key: &str, default: usize| -> ApiResult<usize> {
        match params.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| ApiError::parsing(format!("[{kind}] [{key}] must be a non-negative integer"))),
        }
    };
    let max_expansions = count("max_expansions", 50)?;
    if max_expansions == 0 {
        return Err(ApiError::bad_request(format!("[{kind}] [max_expansions] must be positive")));
    }
    let transpositions = match params.get(transpositions_key) {
        None => true,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| ApiError::parsing(format!("[{kind}] [{transpositions_key}] must be a boolean")))?,
    };
    Ok(Some(FuzzyOptions {
        max_edits,
        prefix_length: count("prefix_length", 0)?,
        max_expansions,
        transpositions,
    }))
}

fn check_keys(kind: &str, v: &(impl AsMap + ?Sized), allowed: &[&str]) -> ApiResult<()> {
    if let Some(m) = v.as_map() {
        for k in m.keys() {
            if !allowed.contains(&k.as_str()) {
                return Err(ApiError::parsing(format!("[{kind}] query does not support [{k}]")));
            }
        }
    }
    Ok(())
}

/// Elasticsearch's `minimum_should_match` for `n` optional clauses: a count (`2`), all but a count (`-1`), a
/// percentage rounded down (`"75%"`) or all but a percentage rounded down (`"-25%"`), clamped to `[0, n]`;
/// or conditions (`"3<90%"`, `"2<-25% 9<-3"`), as Lucene's `calculateMinShouldMatch` reads them: every
/// clause is required up to the first bound, past each `N<spec` the spec applies (the last whose bound `n`
/// exceeds).
fn minimum_should_match(v: &Value, n: usize) -> ApiResult<usize> {
    let text = match v {
        Value::Number(x) => x.to_string(),
        Value::String(s) => s.trim().to_string(),
        _ => String::new(),
    };
    let bad = || {
        ApiError::unsupported(format!(
            "[minimum_should_match] [{v}] (a count, a negative count, a percentage, or conditions like \"3<90%\")"
        ))
    };
    if !text.contains('<') {
        return simple_minimum_should_match(&text, n).ok_or_else(bad);
    }
    // Spaces around `<` do not separate conditions.
    let mut squeezed = text.clone();
    while squeezed.contains(" <") || squeezed.contains("< ") {
        squeezed = squeezed.replace(" <", "<").replace("< ", "<");
    }
    let mut required = n;
    for cond in squeezed.split_whitespace() {
        let (bound, spec) = cond.split_once('<').ok_or_else(bad)?;
        let bound: usize = bound.parse().map_err(|_| bad())?;
        if n <= bound {
            return Ok(required);
        }
        required = simple_minimum_should_match(spec, n).ok_or_else(bad)?;
    }
    Ok(required)
}

/// One `minimum_should_match` spec without conditions ([`minimum_should_match`]), or `None` if malformed.
fn simple_minimum_should_match(text: &str, n: usize) -> Option<usize> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (percent, digits) = match rest.strip_suffix('%') {
        Some(d) => (true, d),
        None => (false, rest),
    };
    let x = digits.parse::<u64>().ok()?;
    let part = if percent { (n as u64).saturating_mul(x.min(100)) / 100 } else { x };
    let required = if negative { (n as u64).saturating_sub(part) } else { part };
    Some(required.min(n as u64) as usize)
}

/// A `match` query's terms with its `minimum_should_match` (an OR of terms made an at-least; an AND or a
/// single term is left as it is, as Elasticsearch applies it to the optional clauses only).
fn with_minimum_should_match(q: Query, msm: Option<&Value>) -> ApiResult<Query> {
    let Some(v) = msm.filter(|v| !v.is_null()) else { return Ok(q) };
    Ok(match q {
        Query::Bool { must, should, must_not, filter } if must.is_empty() && should.len() > 1 => {
            match minimum_should_match(v, should.len())? {
                0 | 1 => Query::Bool { must, should, must_not, filter },
                min => Query::AtLeast { min, of: should },
            }
        }
        q => {
            minimum_should_match(v, 1)?;
            q
        }
    })
}

/// `q` with the `boost` of the clause's parameters `v` (Elasticsearch's: a number, or a string holding one;
/// 1 without one), or a 400 for a boost that is not a finite number of at least 0.
fn boosted(q: Query, v: &(impl AsMap + ?Sized)) -> ApiResult<Query> {
    match boost_value(v)? {
        Some(boost) => q.boosted(boost).map_err(ApiError::parsing),
        None => Ok(q),
    }
}

/// The `boost` of the clause's parameters `v`, if it has one: a finite number of at least 0, or a string
/// holding one.
fn boost_value(v: &(impl AsMap + ?Sized)) -> ApiResult<Option<f32>> {
    let given = match v.as_map().and_then(|m| m.get("boost")) {
        None | Some(Value::Null) => return Ok(None),
        Some(b) => b,
    };
    let boost = match given {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match boost.map(|b| b as f32) {
        Some(b) if b.is_finite() && b >= 0.0 => Ok(Some(b)),
        _ => Err(bad_boost(&format!("[boost] {given}"))),
    }
}

fn bad_boost(what: &str) -> ApiError {
    ApiError::parsing(format!("{what}: a boost must be a finite number of at least 0"))
}

trait AsMap {
    fn as_map(&self) -> Option<&Map<String, Value>>;
}
impl AsMap for Value {
    fn as_map(&self) -> Option<&Map<String, Value>> {
        self.as_object()
    }
}
impl AsMap for Map<String, Value> {
    fn as_map(&self) -> Option<&Map<String, Value>> {
        Some(self)
    }
}

fn operator_is_and(kind: &str, params: &(impl AsMap + ?Sized)) -> ApiResult<bool> {
    match params.as_map().and_then(|m| m.get("operator")) {
        None => Ok(false),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("or") => Ok(false),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("and") => Ok(true),
        Some(v) => {
            Err(ApiError::parsing(format!("[{kind}] [operator] must be \"and\" or \"or\", found {v}")))
        }
    }
}

/// A string, number or boolean as text.
fn scalar_text(kind: &str, v: Option<&Value>) -> ApiResult<String> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(Value::Bool(b)) => Ok(b.to_string()),
        Some(other) => {
            Err(ApiError::parsing(format!("[{kind}] expects a string, number or boolean, found {other}")))
        }
        None => Err(ApiError::parsing(format!("[{kind}] is missing its value"))),
    }
}

/// What a query looks for, per field (`None`: the default fields), for highlighting: analyzed terms and
/// prefixes of the positive clauses (never those under `must_not`), each with the analyzer a
/// [`Query::Analyzed`] around it names (`None`: its fields' own; the innermost wins).
pub fn positive_leaves<'q>(
    q: &'q Query,
    over: Option<AnalyzerConfig>,
    out: &mut Vec<(&'q Query, Option<AnalyzerConfig>)>,
) {
    match q {
        Query::Bool { must, should, filter, .. } => {
            for c in must.iter().chain(should).chain(filter) {
                positive_leaves(c, over, out);
            }
        }
        Query::Boost { query, .. } | Query::ConstantScore { query, .. } => positive_leaves(query, over, out),
        Query::Analyzed { analyzer, query } => positive_leaves(query, Some(*analyzer), out),
        Query::AtLeast { of, .. } | Query::DisMax { of, .. } => {
            of.iter().for_each(|c| positive_leaves(c, over, out))
        }
        Query::MatchAll | Query::Range { .. } | Query::Ids { .. } => {}
        leaf => out.push((leaf, over)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::from_mappings(&json!({"properties": {
            "body": {"type": "text"}, "tag": {"type": "keyword"}, "n": {"type": "long"}
        }}))
        .unwrap()
    }

    fn tr(v: Value) -> ApiResult<Query> {
        Translator::new(&schema(), 1024, 20).query(&v)
    }

    fn term(f: &str, t: &str) -> Query {
        Query::Term { field: Some(f.into()), text: t.into() }
    }

    /// A clause's `analyzer` wraps what it translates to in [`Query::Analyzed`] (built-in names, and the
    /// index's own through its settings); a keyword field then matches the analyzer's tokens; a
    /// `match_bool_prefix`'s prefix is the analyzer's form of its last token; an unknown name is a 400.
    #[test]
    fn a_clause_analyzer_wraps_its_query() {
        let with = |analyzer, q| Query::Analyzed { analyzer, query: Box::new(q) };
        let (standard, english) = (AnalyzerConfig::simple(), AnalyzerConfig::english());
        let should = |c| Query::Bool { must: vec![], should: c, must_not: vec![], filter: vec![] };
        assert_eq!(
            tr(json!({"match": {"body": {"query": "Running dogs", "analyzer": "english"}}})).unwrap(),
            with(english, should(vec![term("body", "running"), term("body", "dogs")]))
        );
        // A keyword field: the whole value without an analyzer, its tokens with one.
        assert_eq!(tr(json!({"match": {"tag": "Big Red"}})).unwrap(), term("tag", "Big Red"));
        assert_eq!(
            tr(json!({"match": {"tag": {"query": "Big Red", "analyzer": "standard"}}})).unwrap(),
            with(standard, should(vec![term("tag", "big"), term("tag", "red")]))
        );
        let fuzzy = tr(json!({"match": {"tag": {"query": "Big", "analyzer": "standard", "fuzziness": 1}}}));
        assert!(
            matches!(fuzzy.as_ref().unwrap(), Query::Analyzed { query, .. }
                if matches!(**query, Query::Fuzzy { analyzed: true, .. })),
            "{fuzzy:?}"
        );
        // The prefix is the analyzer's form of the last token: english stems it, the field's would not.
        let pre = |t: &str| Query::Prefix { field: Some("body".into()), prefix: t.into() };
        assert_eq!(
            tr(json!({"match_bool_prefix": {"body": {"query": "running", "analyzer": "english"}}})).unwrap(),
            with(english, pre("run"))
        );
        assert_eq!(tr(json!({"match_bool_prefix": {"body": "running"}})).unwrap(), pre("running"));
        let phrase = Query::Phrase { field: Some("body".into()), text: "a b".into(), slop: 0 };
        assert_eq!(
            tr(json!({"match_phrase": {"body": {"query": "a b", "analyzer": "stop", "boost": 2}}})).unwrap(),
            Query::Boost {
                query: Box::new(with(AnalyzerConfig { stop_words: true, stemming: false }, phrase)),
                boost: 2.0
            }
        );
        assert!(matches!(
            tr(json!({"query_string": {"query": "a b", "analyzer": "english"}})).unwrap(),
            Query::Analyzed { analyzer, .. } if analyzer == english
        ));
        assert!(matches!(
            tr(json!({"multi_match": {"query": "a", "fields": ["body", "tag"], "analyzer": "english"}})).unwrap(),
            Query::Analyzed { analyzer, query } if analyzer == english && matches!(*query, Query::Bool { .. })
        ));
        // A keyword field's prefix is the analyzer's form of its last token too.
        assert_eq!(
            tr(json!({"match_bool_prefix": {"tag": {"query": "BI", "analyzer": "standard"}}})).unwrap(),
            with(standard, Query::Prefix { field: Some("tag".into()), prefix: "bi".into() })
        );
        // A clause's analyzer is its own: the next clause translates as if there were none.
        assert_eq!(
            tr(json!({"bool": {"should": [
                {"match": {"tag": {"query": "Big", "analyzer": "standard"}}}, {"match": {"tag": "Big Red"}}]}}))
            .unwrap(),
            should(vec![with(standard, term("tag", "big")), term("tag", "Big Red")])
        );
        let e = tr(json!({"match": {"body": {"query": "x", "analyzer": "plain"}}})).unwrap_err();
        assert!(e.reason.contains("failed to find analyzer [plain]"), "{}", e.reason);
        // The index's own analyzers, through its settings.
        let mut settings = spirit::IndexSettings::default();
        settings.analyzers.insert("plain".into(), json!({"type": "english"}));
        let q = Translator::new(&schema(), 1024, 20)
            .on_index(&settings)
            .query(&json!({"match": {"body": {"query": "x", "analyzer": "plain"}}}))
            .unwrap();
        assert_eq!(q, with(english, term("body", "x")));
    }

    #[test]
    fn match_splits_into_terms_with_the_operator() {
        let or = tr(json!({"match": {"body": "Boundary layer"}})).unwrap();
        assert_eq!(
            or,
            Query::Bool {
                must: vec![],
                should: vec![term("body", "boundary"), term("body", "layer")],
                must_not: vec![],
                filter: vec![]
            }
        );
        let and = tr(json!({"match": {"body": {"query": "a b", "operator": "and"}}})).unwrap();
        assert!(matches!(and, Query::Bool { ref must, .. } if must.len() == 2));
        assert_eq!(tr(json!({"match": {"body": "one"}})).unwrap(), term("body", "one"));
    }

    #[test]
    fn keyword_and_numeric_fields_match_exact_values() {
        assert_eq!(tr(json!({"match": {"tag": "Big Red"}})).unwrap(), term("tag", "Big Red"));
        assert_eq!(
            tr(json!({"term": {"n": 5}})).unwrap(),
            Query::Range {
                field: "n".into(),
                lower: Bound::Included("5".into()),
                upper: Bound::Included("5".into())
            }
        );
    }

    #[test]
    fn bool_and_range() {
        let q = tr(json!({"bool": {
            "must": {"match": {"body": "x"}},
            "filter": [{"range": {"n": {"gte": 1, "lt": 10}}}],
            "must_not": [{"term": {"tag": "t"}}],
            "should": [{"match": {"body": "y"}}],
            "minimum_should_match": 1
        }}))
        .unwrap();
        let Query::Bool { must, should, must_not, filter } = q else { panic!() };
        assert_eq!(must.len(), 2, "minimum_should_match 1 makes the shoulds required");
        assert!(should.is_empty());
        assert_eq!(must_not, vec![term("tag", "t")]);
        assert_eq!(
            filter,
            vec![Query::Range {
                field: "n".into(),
                lower: Bound::Included("1".into()),
                upper: Bound::Excluded("10".into())
            }]
        );
        assert_eq!(tr(json!({"bool": {}})).unwrap(), Query::MatchAll);
    }

    #[test]
    fn query_string_takes_a_default_field() {
        let q = tr(json!({"query_string": {"query": "a +b", "default_field": "body"}})).unwrap();
        let mut leaves = vec![];
        positive_leaves(&q, None, &mut leaves);
        assert!(leaves
            .iter()
            .all(|l| matches!(l, (Query::Term { field: Some(f), .. }, None) if f == "body")));
        assert_eq!(
            tr(json!({"query_string": {"query": "\"abc"}})).unwrap_err().kind,
            "query_shard_exception"
        );
    }

    #[test]
    fn unsupported_and_malformed_queries_are_refused_by_name() {
        let e = tr(json!({"no_such_query": {}})).unwrap_err();
        assert_eq!((e.status.as_u16(), e.kind), (400, "parsing_exception"));
        assert!(e.reason.contains("no_such_query"));
        assert!(tr(json!({"match": {"body": "x", "title": "y"}})).is_err());
        assert!(tr(json!({"match": {"body": {"query": "x", "fuzziness": "AUTO:1,4"}}}))
            .unwrap_err()
            .reason
            .contains("fuzziness"));
        for bad in [json!(-1), json!(1.5), json!("x"), json!([2]), json!(1u64 << 40)] {
            let e = tr(json!({"match_phrase": {"body": {"query": "x y", "slop": bad}}})).unwrap_err();
            assert!(e.reason.contains("[slop] must be a whole number"), "{}", e.reason);
        }
        let e = tr(json!({"multi_match": {"query": "x y", "fields": ["body"], "slop": 2}})).unwrap_err();
        assert!(e.reason.contains("[slop] with type [best_fields]"), "{}", e.reason);
        assert!(tr(json!({"match_all": {"boost": -1}})).unwrap_err().reason.contains("boost"));
        assert!(tr(json!({"term": {"tag": {"value": {"x": 1}}}})).is_err());
        assert!(tr(json!([1, 2])).is_err());
        assert!(tr(json!({"match_all": {}, "match_none": {}})).is_err());
    }

    #[test]
    fn phrase_slop_is_passed_on() {
        let phrase =
            |field: &str, slop| Query::Phrase { field: Some(field.into()), text: "a b".into(), slop };
        assert_eq!(
            tr(json!({"match_phrase": {"body": {"query": "a b", "slop": 2}}})).unwrap(),
            phrase("body", 2)
        );
        assert_eq!(
            tr(json!({"match_phrase": {"body": {"query": "a b", "slop": "3"}}})).unwrap(),
            phrase("body", 3)
        );
        assert_eq!(tr(json!({"match_phrase": {"body": "a b"}})).unwrap(), phrase("body", 0));
        assert_eq!(
            tr(json!({"multi_match": {"query": "a b", "fields": ["title"], "type": "phrase", "slop": 1}}))
                .unwrap(),
            phrase("title", 1)
        );
        assert_eq!(
            tr(json!({"query_string": {"query": "\"a b\"~4", "default_field": "body"}})).unwrap(),
            phrase("body", 4)
        );
        assert_eq!(
            tr(json!({"query_string": {"query": "\"a b\"", "default_field": "body", "phrase_slop": 3}}))
                .unwrap(),
            phrase("body", 3)
        );
        let e = tr(json!({"query_string": {"query": "x", "phrase_slop": -2}})).unwrap_err();
        assert!(e.reason.contains("[phrase_slop] must be a whole number"), "{}", e.reason);
    }

    fn boost(q: Query, boost: f32) -> Query {
        Query::Boost { query: Box::new(q), boost }
    }

    #[test]
    fn match_bool_prefix_forms() {
        let pre = |f: &str, p: &str| Query::Prefix { field: Some(f.into()), prefix: p.into() };
        let should =
            |c: Vec<Query>| Query::Bool { must: vec![], should: c, must_not: vec![], filter: vec![] };
        assert_eq!(
            tr(json!({"match_bool_prefix": {"body": "Quick brown F"}})).unwrap(),
            should(vec![term("body", "quick"), term("body", "brown"), pre("body", "f")])
        );
        assert_eq!(tr(json!({"match_bool_prefix": {"body": {"query": "fo"}}})).unwrap(), pre("body", "fo"));
        let and = tr(json!({"match_bool_prefix": {"body": {"query": "a b", "operator": "and", "boost": 2}}}))
            .unwrap();
        let must = Query::Bool {
            must: vec![term("body", "a"), pre("body", "b")],
            should: vec![],
            must_not: vec![],
            filter: vec![],
        };
        assert_eq!(and, boost(must, 2.0));
        assert!(matches!(
            tr(json!({"match_bool_prefix": {"body": {"query": "a b c", "minimum_should_match": 2}}})).unwrap(),
            Query::AtLeast { min: 2, ref of } if matches!(of[..], [_, _, Query::Prefix { .. }])
        ));
        // A keyword field's whole value is the prefix; no token makes an empty query.
        assert_eq!(tr(json!({"match_bool_prefix": {"tag": "Red Ap"}})).unwrap(), pre("tag", "Red Ap"));
        assert_eq!(tr(json!({"match_bool_prefix": {"body": "!!"}})).unwrap(), should(vec![]));
        for bad in [
            json!({"match_bool_prefix": {"body": {"query": "a", "fuzziness": "AUTO"}}}),
            json!({"match_bool_prefix": {"body": {"query": "a", "analyzer": "nope"}}}),
            json!({"match_bool_prefix": {"body": {"query": "a", "analyzer": 3}}}),
            json!({"match_bool_prefix": {"body": {"query": "a", "operator": "xor"}}}),
        ] {
            assert!(tr(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn match_phrase_prefix_forms() {
        let pp = |t: &str, n: usize, slop: u32| Query::PhrasePrefix {
            field: Some("body".into()),
            text: t.into(),
            max_expansions: n,
            slop,
        };
        assert_eq!(tr(json!({"match_phrase_prefix": {"body": "quick br"}})).unwrap(), pp("quick br", 50, 0));
        assert_eq!(
            tr(json!({"match_phrase_prefix": {"body": {"query": "a b", "max_expansions": 3, "slop": 0, "boost": 2}}}))
                .unwrap(),
            boost(pp("a b", 3, 0), 2.0)
        );
        assert_eq!(
            tr(json!({"match_phrase_prefix": {"body": {"query": "a b", "slop": 2}}})).unwrap(),
            pp("a b", 50, 2)
        );
        for bad in [
            json!({"match_phrase_prefix": {"body": {"query": "a b", "slop": -1}}}),
            json!({"match_phrase_prefix": {"body": {"query": "a b", "max_expansions": "many"}}}),
            json!({"match_phrase_prefix": {"body": {"query": "a b", "zero_terms_query": "all"}}}),
        ] {
            assert!(tr(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn multi_match_prefix_types() {
        let q = tr(
            json!({"multi_match": {"query": "quick br", "fields": ["body", "tag^2"], "type": "phrase_prefix",
            "max_expansions": 7}}),
        )
        .unwrap();
        let pp = |f: &str| Query::PhrasePrefix {
            field: Some(f.into()),
            text: "quick br".into(),
            max_expansions: 7,
            slop: 0,
        };
        assert_eq!(
            q,
            Query::Bool {
                must: vec![],
                should: vec![pp("body"), boost(pp("tag"), 2.0)],
                must_not: vec![],
                filter: vec![]
            }
        );
        let q = tr(json!({"multi_match": {"query": "quick br", "fields": ["body"], "type": "bool_prefix"}}))
            .unwrap();
        assert_eq!(q, tr(json!({"match_bool_prefix": {"body": "quick br"}})).unwrap());
        let q = tr(
            json!({"multi_match": {"query": "a b", "fields": ["body"], "type": "phrase_prefix", "slop": 1}}),
        );
        assert_eq!(
            q.unwrap(),
            Query::PhrasePrefix {
                field: Some("body".into()),
                text: "a b".into(),
                max_expansions: 50,
                slop: 1
            }
        );
        for bad in [
            json!({"multi_match": {"query": "a b", "type": "best_fields", "slop": 1}}),
            json!({"multi_match": {"query": "a b", "type": "phrase_prefix", "fuzziness": 1}}),
            json!({"multi_match": {"query": "a b", "type": "phrase_prefix", "max_expansions": 0}}),
            json!({"multi_match": {"query": "a b", "type": "bool_prefix"}}),
            json!({"multi_match": {"query": "a b", "type": "cross_fields"}}),
        ] {
            assert!(tr(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn regexp_forms() {
        let re = |f: &str, p: &str, flags: RegexpFlags, ci: bool| Query::Regexp {
            field: Some(f.into()),
            pattern: p.into(),
            flags,
            case_insensitive: ci,
        };
        assert_eq!(
            tr(json!({"regexp": {"body": "a.*"}})).unwrap(),
            re("body", "a.*", RegexpFlags::ALL, false)
        );
        assert_eq!(
            tr(json!({"regexp": {"tag": {"value": "R.d", "flags": "EMPTY|ANYSTRING", "case_insensitive": true,
                "max_determinized_states": 20000, "rewrite": "constant_score", "boost": 2}}}))
            .unwrap(),
            boost(re("tag", "R.d", RegexpFlags::parse("EMPTY|ANYSTRING").unwrap(), true), 2.0)
        );
        assert_eq!(
            tr(json!({"query_string": {"query": "/a.c/", "default_field": "body"}})).unwrap(),
            re("body", "a.c", RegexpFlags::ALL, false)
        );
        // So does a fuzzy word (it used to keep the index's default fields).
        assert!(matches!(
            tr(json!({"query_string": {"query": "roam~1", "default_field": "body"}})).unwrap(),
            Query::Fuzzy { field: Some(f), .. } if f == "body"
        ));
        for bad in [
            json!({"regexp": {"body": {"value": "a", "flags": "ALL|NOPE"}}}),
            json!({"regexp": {"body": {"value": "a", "flags": ["ALL"]}}}),
            json!({"regexp": {"body": {"value": "a", "case_insensitive": 1}}}),
            json!({"regexp": {"body": {"value": "a", "max_determinized_states": -1}}}),
            json!({"regexp": {"body": {"value": "a", "flags_value": 255}}}),
            json!({"regexp": {"body": {}}}),
        ] {
            assert!(tr(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn wildcard_forms() {
        let w = |f: &str, p: &str, ci: bool| Query::Wildcard {
            field: Some(f.into()),
            pattern: p.into(),
            case_insensitive: ci,
        };
        assert_eq!(tr(json!({"wildcard": {"body": "te*t"}})).unwrap(), w("body", "te*t", false));
        assert_eq!(tr(json!({"wildcard": {"body": {"wildcard": "x?"}}})).unwrap(), w("body", "x?", false));
        assert_eq!(
            tr(json!({"wildcard": {"tag": {"value": "R?d", "case_insensitive": true, "boost": 2}}})).unwrap(),
            boost(w("tag", "R?d", true), 2.0)
        );
        // Inside `query_string` too, where a `?` is one character.
        assert_eq!(
            tr(json!({"query_string": {"query": "te?t", "default_field": "body"}})).unwrap(),
            w("body", "te?t", false)
        );
        for bad in [
            json!({"wildcard": {"body": {"value": "a*", "wildcard": "b*"}}}),
            json!({"wildcard": {"body": {"value": "a*", "case_insensitive": "yes"}}}),
            json!({"wildcard": {"body": {"value": "a*", "flags": "ALL"}}}),
            json!({"wildcard": {"body": {}}}),
        ] {
            assert!(tr(bad.clone()).is_err(), "{bad}");
        }
    }

    #[test]
    fn boosts_wrap_the_clause() {
        assert_eq!(tr(json!({"match_all": {"boost": 2}})).unwrap(), boost(Query::MatchAll, 2.0));
        assert_eq!(
            tr(json!({"match": {"body": {"query": "one", "boost": 1.5}}})).unwrap(),
            boost(term("body", "one"), 1.5)
        );
        assert_eq!(
            tr(json!({"term": {"tag": {"value": "t", "boost": "3"}}})).unwrap(),
            boost(term("tag", "t"), 3.0)
        );
        assert_eq!(
            tr(json!({"match_phrase": {"body": {"query": "a b", "boost": 2}}})).unwrap(),
            boost(Query::Phrase { field: Some("body".into()), text: "a b".into(), slop: 0 }, 2.0)
        );
        assert_eq!(
            tr(json!({"prefix": {"body": {"value": "ab", "boost": 0}}})).unwrap(),
            boost(Query::Prefix { field: Some("body".into()), prefix: "ab".into() }, 0.0)
        );
        let range = tr(json!({"range": {"n": {"gte": 1, "boost": 4}}})).unwrap();
        assert!(
            matches!(range, Query::Boost { ref query, boost: 4.0 } if matches!(**query, Query::Range { .. }))
        );
        let b = tr(json!({"bool": {"must": [{"match": {"body": "x"}}], "boost": 2}})).unwrap();
        assert!(matches!(b, Query::Boost { ref query, boost: 2.0 } if matches!(**query, Query::Bool { .. })));
        assert_eq!(
            tr(json!({"query_string": {"query": "x^3", "default_field": "body", "boost": 2}})).unwrap(),
            boost(boost(term("body", "x"), 3.0), 2.0)
        );
        // A boost of 1 adds nothing.
        assert_eq!(
            tr(json!({"match": {"body": {"query": "one", "boost": 1}}})).unwrap(),
            term("body", "one")
        );
    }

    #[test]
    fn multi_match_boosts_each_field() {
        let q = tr(json!({"multi_match": {"query": "x", "fields": ["body^2", "tag"], "boost": 3}})).unwrap();
        assert_eq!(
            q,
            boost(
                Query::Bool {
                    must: vec![],
                    should: vec![boost(term("body", "x"), 2.0), term("tag", "x")],
                    must_not: vec![],
                    filter: vec![]
                },
                3.0
            )
        );
        assert!(tr(json!({"multi_match": {"query": "x", "fields": ["body^x"]}}))
            .unwrap_err()
            .reason
            .contains("boost"));
        assert!(tr(json!({"multi_match": {"query": "x", "fields": ["body^-2"]}}))
            .unwrap_err()
            .reason
            .contains("boost"));
    }

    #[test]
    fn bad_boosts_are_refused() {
        for b in [json!(-0.5), json!("abc"), json!([1]), json!({"x": 1})] {
            let e = tr(json!({"match": {"body": {"query": "x", "boost": b}}})).unwrap_err();
            assert_eq!((e.status.as_u16(), e.kind), (400, "parsing_exception"), "{b}");
            assert!(e.reason.contains("boost"), "{}", e.reason);
        }
        // The query string's own boosts are checked by its parser.
        assert_eq!(tr(json!({"query_string": {"query": "x^-1"}})).unwrap_err().kind, "query_shard_exception");
    }

    #[test]
    fn minimum_should_match_counts_and_percentages() {
        let v = |x: Value, n| minimum_should_match(&x, n);
        assert_eq!(v(json!(2), 4).unwrap(), 2);
        assert_eq!(v(json!("3"), 4).unwrap(), 3);
        assert_eq!(v(json!(-1), 4).unwrap(), 3);
        assert_eq!(v(json!("75%"), 4).unwrap(), 3);
        assert_eq!(v(json!("70%"), 4).unwrap(), 2, "rounded down");
        assert_eq!(v(json!("-25%"), 4).unwrap(), 3);
        assert_eq!(v(json!("-30%"), 4).unwrap(), 3, "the part left out is rounded down");
        assert_eq!(v(json!(9), 4).unwrap(), 4, "clamped to the clause count");
        assert_eq!(v(json!(-9), 4).unwrap(), 0);
        // Conditions: all up to the first bound, then the spec of the last bound exceeded.
        for (n, want) in [(1, 1), (3, 3), (4, 3), (10, 9)] {
            assert_eq!(v(json!("3<90%"), n).unwrap(), want, "3<90% of {n}");
        }
        for (n, want) in [(2, 2), (3, 3), (4, 3), (9, 7), (10, 7), (12, 9)] {
            assert_eq!(v(json!("2<-25% 9<-3"), n).unwrap(), want, "2<-25% 9<-3 of {n}");
        }
        assert_eq!(v(json!(" 2 < -25%  9 <-3 "), 12).unwrap(), 9, "spaces around '<'");
        for bad in
            [json!("3<"), json!("<90%"), json!("x<1"), json!("3<90% 5"), json!("x"), json!(1.5), json!(true)]
        {
            let e = v(bad.clone(), 4).unwrap_err();
            assert!(e.reason.contains("minimum_should_match"), "{bad}: {}", e.reason);
        }
    }

    #[test]
    fn minimum_should_match_above_one_is_an_at_least_clause() {
        let shoulds = || vec![term("body", "a"), term("body", "b"), term("body", "c")];
        let q = tr(json!({"bool": {"should": [{"term": {"body": "a"}}, {"term": {"body": "b"}},
                                             {"term": {"body": "c"}}], "minimum_should_match": "67%"}}));
        let at_least = Query::AtLeast { min: 2, of: shoulds() };
        assert_eq!(
            q.unwrap(),
            Query::Bool { must: vec![at_least.clone()], should: vec![], must_not: vec![], filter: vec![] }
        );
        let q = tr(json!({"match": {"body": {"query": "a b c", "minimum_should_match": -1}}})).unwrap();
        assert_eq!(q, at_least);
        // With the AND operator (or one term) there is nothing optional to count.
        let q =
            tr(json!({"match": {"body": {"query": "a b", "operator": "and", "minimum_should_match": 2}}}));
        assert!(matches!(q.unwrap(), Query::Bool { ref must, .. } if must.len() == 2));
        // 0 keeps Lucene's default: with only should clauses, one of them.
        let q =
            tr(json!({"bool": {"should": [{"term": {"body": "a"}}], "minimum_should_match": 0}})).unwrap();
        assert_eq!(
            q,
            Query::Bool { must: vec![], should: vec![term("body", "a")], must_not: vec![], filter: vec![] }
        );
    }

    #[test]
    fn constant_score_exists_dis_max_and_terms() {
        let any = |qs: Vec<Query>| Query::Bool { must: vec![], should: qs, must_not: vec![], filter: vec![] };
        assert_eq!(
            tr(json!({"terms": {"tag": ["a", "b"], "boost": 2}})).unwrap(),
            Query::ConstantScore {
                query: Box::new(any(vec![term("tag", "a"), term("tag", "b")])),
                score: 2.0
            }
        );
        assert_eq!(
            tr(json!({"constant_score": {"filter": {"term": {"tag": "a"}}}})).unwrap(),
            Query::ConstantScore { query: Box::new(term("tag", "a")), score: 1.0 }
        );
        assert_eq!(
            tr(json!({"exists": {"field": "n"}})).unwrap(),
            Query::Prefix { field: Some("n".into()), prefix: String::new() }
        );
        assert_eq!(
            tr(json!({"dis_max": {"queries": [{"term": {"tag": "a"}}, {"match": {"body": "x"}}], "tie_breaker": 0}}))
                .unwrap(),
            Query::DisMax { of: vec![term("tag", "a"), term("body", "x")], tie_breaker: 0.0 }
        );
        assert_eq!(
            tr(json!({"dis_max": {"queries": [{"term": {"tag": "a"}}], "tie_breaker": 0.7}})).unwrap(),
            Query::DisMax { of: vec![term("tag", "a")], tie_breaker: 0.7 }
        );
        for bad in [json!(-0.1), json!(1.5), json!("x"), json!([0.5])] {
            let e = tr(json!({"dis_max": {"queries": [{"term": {"tag": "a"}}], "tie_breaker": bad}}))
                .unwrap_err();
            assert!(e.reason.contains("tie_breaker"), "{}", e.reason);
        }
        assert!(tr(json!({"dis_max": {"queries": []}})).is_err());
        assert!(tr(json!({"constant_score": {"query": {"term": {"tag": "a"}}}})).is_err());
        assert!(tr(json!({"constant_score": {"filter": {"term": {"tag": "a"}}, "boost": -2}})).is_err());
        assert!(tr(json!({"exists": {"field": "n", "x": 1}})).is_err());
    }

    #[test]
    fn clause_and_depth_limits() {
        let many: Vec<Value> = (0..20).map(|i| json!({"term": {"tag": i.to_string()}})).collect();
        let e = Translator::new(&schema(), 10, 20).query(&json!({"bool": {"should": many}})).unwrap_err();
        assert_eq!(e.kind, "too_many_clauses");
        let mut deep = json!({"match_all": {}});
        for _ in 0..30 {
            deep = json!({"bool": {"must": deep}});
        }
        assert!(Translator::new(&schema(), 1024, 20).query(&deep).unwrap_err().reason.contains("deeper"));
    }
}
