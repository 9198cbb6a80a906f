//! Highlighting (`"highlight": {"fields": {...}}` in a search): the stored text of a hit is analyzed again
//! with its field's analyzer, keeping byte offsets ([`spirit::analysis::Analyzer::analyze_spans`]); tokens
//! whose term the query looks for in that field (or which start with one of its prefixes) are wrapped in the
//! pre/post tags, and the text is cut into fragments around them, like Elasticsearch's unified highlighter
//! with its defaults: fragments of about `fragment_size` characters, at most `number_of_fragments` of them,
//! best-scored first (most distinct terms), whole text when `number_of_fragments` is 0. `encoder: html`
//! escapes the text (the tags are not escaped), so a page can insert fragments as HTML.

use crate::dsl::positive_leaves;
use crate::error::{ApiError, ApiResult};
use serde_json::{Map, Value};
use spirit::schema::{simple_match as glob, FieldType, Schema};
use spirit::Query;
use std::collections::{HashMap, HashSet};

/// A parsed `highlight` request.
#[derive(Debug, Clone)]
pub struct HighlightSpec {
    fields: Vec<(String, FieldOptions)>,
}

#[derive(Debug, Clone)]
struct FieldOptions {
    pre: String,
    post: String,
    fragment_size: usize,
    fragments: usize,
    html: bool,
}

impl HighlightSpec {
    pub fn parse(v: &Value) -> ApiResult<HighlightSpec> {
        let obj = v.as_object().ok_or_else(|| ApiError::parsing("[highlight] must be an object"))?;
        let defaults = options(obj, None)?;
        let fields: Vec<(String, &Value)> = match obj.get("fields") {
            Some(Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v)).collect(),
            Some(Value::Array(items)) => items
                .iter()
                .flat_map(|i| i.as_object().into_iter().flat_map(|m| m.iter().map(|(k, v)| (k.clone(), v))))
                .collect(),
            _ => return Err(ApiError::parsing("[highlight] needs [fields]")),
        };
        for key in obj.keys() {
            if ![
                "fields",
                "pre_tags",
                "post_tags",
                "fragment_size",
                "number_of_fragments",
                "encoder",
                "type",
                "require_field_match",
                "order",
            ]
            .contains(&key.as_str())
            {
                return Err(ApiError::unsupported(format!("highlight option [{key}]")));
            }
        }
        let fields = fields
            .into_iter()
            .map(|(f, o)| Ok((f, options(o.as_object().unwrap_or(&Map::new()), Some(&defaults))?)))
            .collect::<ApiResult<_>>()?;
        Ok(HighlightSpec { fields })
    }
}

fn options(m: &Map<String, Value>, base: Option<&FieldOptions>) -> ApiResult<FieldOptions> {
    let mut o = base.cloned().unwrap_or(FieldOptions {
        pre: "<em>".into(),
        post: "</em>".into(),
        fragment_size: 100,
        fragments: 5,
        html: false,
    });
    let tag = |k: &str| -> ApiResult<Option<String>> {
        match m.get(k) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(a.first().and_then(Value::as_str).map(str::to_string)),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(ApiError::parsing(format!("[highlight] [{k}] must be an array of strings"))),
        }
    };
    if let Some(p) = tag("pre_tags")? {
        o.pre = p;
    }
    if let Some(p) = tag("post_tags")? {
        o.post = p;
    }
    if let Some(n) = m.get("fragment_size") {
        o.fragment_size =
            n.as_u64().ok_or_else(|| ApiError::parsing("[fragment_size] must be a number"))? as usize;
    }
    if let Some(n) = m.get("number_of_fragments") {
        o.fragments =
            n.as_u64().ok_or_else(|| ApiError::parsing("[number_of_fragments] must be a number"))? as usize;
    }
    match m.get("encoder").and_then(Value::as_str) {
        None => {}
        Some("html") => o.html = true,
        Some("default") => o.html = false,
        Some(other) => return Err(ApiError::unsupported(format!("highlight encoder [{other}]"))),
    }
    Ok(o)
}

/// What the query looks for in each text field.
#[derive(Default)]
struct Wanted {
    terms: HashSet<String>,
    prefixes: Vec<String>,
    patterns: Vec<spirit::query::Pattern>,
    regexps: Vec<spirit::query::Regexp>,
    /// Fuzzy terms: every token within their edits is marked.
    fuzzy: Vec<(String, spirit::query::FuzzyOptions)>,
}

/// Highlights hits of one query.
pub struct Highlighter<'a> {
    schema: &'a Schema,
    fields: Vec<(String, u16, FieldOptions)>,
    wanted: HashMap<u16, Wanted>,
}

impl<'a> Highlighter<'a> {
    pub fn new(spec: &HighlightSpec, schema: &'a Schema, query: &Query) -> Highlighter<'a> {
        let text_field = |id: u16| schema.field(id).ty == FieldType::Text;
        let mut fields = vec![];
        for (pattern, opts) in &spec.fields {
            for (id, def) in schema.fields().iter().enumerate() {
                let id = id as u16;
                if text_field(id) && glob(pattern, &def.name) && !fields.iter().any(|(_, f, _)| *f == id) {
                    fields.push((def.name.clone(), id, opts.clone()));
                }
            }
        }
        let mut leaves = vec![];
        positive_leaves(query, None, &mut leaves);
        let mut wanted: HashMap<u16, Wanted> = HashMap::new();
        for (leaf, over) in leaves {
            // The leaf's text as the planner analyzes it: by the analyzer the query names, else the field's.
            let over = over.map(spirit::analysis::Analyzer::new);
            let analyzer_of = |id: u16| -> &spirit::analysis::Analyzer {
                over.as_ref().unwrap_or_else(|| schema.search_analyzer(id))
            };
            if let Query::Wildcard { field, pattern, .. } = leaf {
                for id in leaf_fields(schema, field).into_iter().filter(|&id| text_field(id)) {
                    // Text fields' terms are lowercase: so is the pattern, as the planner reads it.
                    let lowered = analyzer_of(id).normalize_prefix(pattern);
                    if let Ok(p) = spirit::query::Pattern::parse(&lowered) {
                        wanted.entry(id).or_default().patterns.push(p);
                    }
                }
                continue;
            }
            if let Query::PhrasePrefix { field, text, .. } = leaf {
                // Its terms, and the last one as the prefix it is.
                for id in leaf_fields(schema, field).into_iter().filter(|&id| text_field(id)) {
                    let w = wanted.entry(id).or_default();
                    let mut toks = vec![];
                    analyzer_of(id).analyze(text, &mut |t, _| toks.push(t.to_string()));
                    if let Some(last) = toks.pop() {
                        w.prefixes.push(last);
                    }
                    w.terms.extend(toks);
                }
                continue;
            }
            if let Query::Fuzzy { field, text, options, analyzed } = leaf {
                // The terms the planner makes fuzzy: the analyzed tokens, or the lowercased text.
                for id in leaf_fields(schema, field).into_iter().filter(|&id| text_field(id)) {
                    let analyzer = analyzer_of(id);
                    let terms = if *analyzed {
                        analyzer.analyze_to_vec(text).into_iter().map(|(t, _)| t).collect()
                    } else {
                        vec![analyzer.normalize_prefix(text)]
                    };
                    let w = wanted.entry(id).or_default();
                    w.fuzzy.extend(terms.into_iter().map(|t| (t, *options)));
                }
                continue;
            }
            if let Query::Regexp { field, pattern, flags, case_insensitive } = leaf {
                // Not analyzed, as the planner reads it.
                if let Ok(re) = spirit::query::Regexp::new(pattern, *flags, *case_insensitive) {
                    for id in leaf_fields(schema, field).into_iter().filter(|&id| text_field(id)) {
                        wanted.entry(id).or_default().regexps.push(re.clone());
                    }
                }
                continue;
            }
            let (field, text, prefix) = match leaf {
                Query::Term { field, text } | Query::Phrase { field, text, .. } => (field, text, false),
                Query::Prefix { field, prefix } => (field, prefix, true),
                _ => continue,
            };
            for id in leaf_fields(schema, field).into_iter().filter(|&id| text_field(id)) {
                let w = wanted.entry(id).or_default();
                let analyzer = analyzer_of(id);
                if prefix {
                    w.prefixes.push(analyzer.normalize_prefix(text));
                } else {
                    analyzer.analyze(text, &mut |t, _| {
                        w.terms.insert(t.to_string());
                    });
                }
            }
        }
        Highlighter { schema, fields, wanted }
    }

    /// The `highlight` object of one hit (`None` when nothing matched in the requested fields).
    pub fn highlight(&self, source: &Value) -> Option<Value> {
        let mut out = Map::new();
        for (name, id, opts) in &self.fields {
            let Some(w) = self.wanted.get(id) else { continue };
            let mut values = vec![];
            // A multi-field's text is its parent's.
            collect_strings(lookup(source, self.schema.source_path(*id)), &mut values);
            let analyzer = self.schema.analyzer(*id);
            let mut fragments: Vec<(usize, String)> = vec![];
            for text in values {
                let mut spans = vec![];
                analyzer.analyze_spans(text, &mut |t, r| {
                    if w.terms.contains(t)
                        || w.prefixes.iter().any(|p| t.starts_with(p.as_str()))
                        || w.patterns.iter().any(|p| p.matches(t))
                        || w.regexps.iter().any(|r| r.matches(t))
                        || w.fuzzy.iter().any(|(q, o)| o.accepts(q, t))
                    {
                        spans.push((r, t.to_string()));
                    }
                });
                if !spans.is_empty() {
                    fragments.extend(fragment(text, &spans, opts));
                }
            }
            if !fragments.is_empty() {
                // Best fragments first (most distinct terms; earlier first among equals), as many as asked.
                fragments.sort_by_key(|f| std::cmp::Reverse(f.0));
                if opts.fragments > 0 {
                    fragments.truncate(opts.fragments);
                }
                out.insert(
                    name.clone(),
                    Value::Array(fragments.into_iter().map(|(_, f)| Value::String(f)).collect()),
                );
            }
        }
        (!out.is_empty()).then_some(Value::Object(out))
    }
}

/// The fields a leaf searches: its own, or the index's default search fields.
fn leaf_fields(schema: &Schema, field: &Option<String>) -> Vec<u16> {
    match field {
        Some(f) => schema.field_id(f).into_iter().collect(),
        None => schema.default_search_fields(),
    }
}

/// The value at a dotted path (`a.b` looks in nested objects too).
fn lookup<'v>(source: &'v Value, path: &str) -> Option<&'v Value> {
    if let Some(v) = source.get(path) {
        return Some(v);
    }
    let (head, rest) = path.split_once('.')?;
    lookup(source.get(head)?, rest)
}

fn collect_strings<'v>(v: Option<&'v Value>, out: &mut Vec<&'v str>) {
    match v {
        Some(Value::String(s)) => out.push(s),
        Some(Value::Array(a)) => a.iter().for_each(|x| collect_strings(Some(x), out)),
        _ => {}
    }
}

/// Cuts `text` into fragments around the matched spans; each fragment is scored by its number of distinct
/// matched terms.
fn fragment(
    text: &str,
    spans: &[(std::ops::Range<usize>, String)],
    o: &FieldOptions,
) -> Vec<(usize, String)> {
    let mut out = vec![];
    if o.fragments == 0 {
        let distinct: HashSet<&str> = spans.iter().map(|(_, t)| t.as_str()).collect();
        out.push((distinct.len(), render(text, 0, text.len(), spans, o)));
        return out;
    }
    let size = o.fragment_size.max(1);
    let mut i = 0;
    while i < spans.len() {
        let first = &spans[i].0;
        // Centre the first match in a window of about `size` bytes, then snap to word boundaries.
        let start = snap_back(text, first.start.saturating_sub(size.saturating_sub(first.len()) / 2));
        let mut end = snap_forward(text, (start + size).max(first.end).min(text.len()));
        let mut j = i;
        while j + 1 < spans.len() && spans[j + 1].0.end <= end {
            j += 1;
        }
        end = end.max(spans[j].0.end);
        let distinct: HashSet<&str> = spans[i..=j].iter().map(|(_, t)| t.as_str()).collect();
        out.push((distinct.len(), render(text, start, end, &spans[i..=j], o)));
        i = j + 1;
    }
    out
}

fn snap_back(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    // Start at the beginning of a word: step back over alphanumerics (at most a word's length).
    let mut steps = 0;
    while i > 0 && steps < 40 {
        let c = text[..i].chars().next_back().expect("not at start");
        if !c.is_alphanumeric() {
            break;
        }
        i -= c.len_utf8();
        steps += 1;
    }
    i
}

fn snap_forward(text: &str, mut i: usize) -> usize {
    while !text.is_char_boundary(i) {
        i += 1;
    }
    let mut steps = 0;
    while i < text.len() && steps < 40 {
        let c = text[i..].chars().next().expect("not at end");
        if !c.is_alphanumeric() {
            break;
        }
        i += c.len_utf8();
        steps += 1;
    }
    i
}

fn render(
    text: &str,
    start: usize,
    end: usize,
    spans: &[(std::ops::Range<usize>, String)],
    o: &FieldOptions,
) -> String {
    let mut s = String::with_capacity(end - start + spans.len() * (o.pre.len() + o.post.len()));
    let mut at = start;
    for (r, _) in spans.iter().filter(|(r, _)| r.start >= start && r.end <= end) {
        push_text(&mut s, &text[at..r.start], o.html);
        s.push_str(&o.pre);
        push_text(&mut s, &text[r.clone()], o.html);
        s.push_str(&o.post);
        at = r.end;
    }
    push_text(&mut s, &text[at..end], o.html);
    s.trim().to_string()
}

fn push_text(out: &mut String, t: &str, html: bool) {
    if !html {
        out.push_str(t);
        return;
    }
    for c in t.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            '/' => out.push_str("&#x2F;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::from_mappings(&json!({"properties": {
            "title": {"type": "text"}, "body": {"type": "text", "analyzer": "english"}, "tag": {"type": "keyword"}
        }}))
        .unwrap()
    }

    fn hl(spec: Value, q: Query, source: Value) -> Option<Value> {
        let s = schema();
        let spec = HighlightSpec::parse(&spec).unwrap();
        Highlighter::new(&spec, &s, &q).highlight(&source)
    }

    #[test]
    fn marks_analyzed_matches_in_the_stored_text() {
        let q = Query::Term { field: Some("body".into()), text: "running".into() };
        let h = hl(
            json!({"fields": {"body": {}}}),
            q,
            json!({"body": "He Runs. They ran; she is RUNNING <fast>"}),
        );
        assert_eq!(h, Some(json!({"body": ["He <em>Runs</em>. They ran; she is <em>RUNNING</em> <fast>"]})));
    }

    #[test]
    fn fuzzy_terms_mark_the_tokens_within_their_edits() {
        let fuzzy = |text: &str, prefix_length| Query::Fuzzy {
            field: Some("body".into()),
            text: text.into(),
            options: spirit::query::FuzzyOptions { prefix_length, ..Default::default() },
            analyzed: true,
        };
        let source = json!({"body": "The quick brown fox, quack"});
        let h = hl(json!({"fields": {"body": {}}}), fuzzy("quikc brwn", 0), source.clone());
        // AUTO: one edit for 4-5 characters (a swap is one), so "quack" (two from "quikc") is not marked.
        assert_eq!(h, Some(json!({"body": ["The <em>quick</em> <em>brown</em> fox, quack"]})));
        // A prefix that must match exactly.
        assert_eq!(hl(json!({"fields": {"body": {}}}), fuzzy("wuick", 1), source), None);
    }

    #[test]
    fn html_encoder_escapes_text_but_not_tags() {
        let q = Query::Prefix { field: None, prefix: "fa".into() };
        let spec =
            json!({"fields": {"*": {}}, "encoder": "html", "pre_tags": ["<mark>"], "post_tags": ["</mark>"]});
        let h = hl(spec, q, json!({"title": "a <b>fast</b> car", "body": "nothing"})).unwrap();
        assert_eq!(h, json!({"title": ["a &lt;b&gt;<mark>fast</mark>&lt;&#x2F;b&gt; car"]}));
    }

    #[test]
    fn fragments_are_cut_around_matches_and_excluded_clauses_never_highlight() {
        let long = format!("{} needle {} needle haystack end", "word ".repeat(100), "other ".repeat(100));
        let q = Query::Bool {
            must: vec![Query::Term { field: Some("title".into()), text: "needle".into() }],
            should: vec![],
            must_not: vec![Query::Term { field: Some("title".into()), text: "haystack".into() }],
            filter: vec![],
        };
        let h = hl(
            json!({"fields": {"title": {"fragment_size": 40, "number_of_fragments": 3}}}),
            q,
            json!({"title": long}),
        )
        .unwrap();
        let frags = h["title"].as_array().unwrap();
        assert_eq!(frags.len(), 2);
        for f in frags {
            let f = f.as_str().unwrap();
            assert!(f.contains("<em>needle</em>") && !f.contains("<em>haystack"), "{f}");
            assert!(f.len() < 80, "{f}");
        }
    }

    #[test]
    fn glob_patterns() {
        assert!(glob("*", "body"));
        assert!(glob("b*y", "body"));
        assert!(glob("ti*", "title"));
        assert!(!glob("ti*", "body"));
        assert!(glob("*.en", "title.en"));
    }
}
