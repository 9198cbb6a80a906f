//! A search's `suggest` section: Elasticsearch's `term` suggester ("did you mean"), from the index's own
//! dictionary, so a term written a moment ago is suggested at once ([`spirit::query::suggest`]).
//!
//! Each suggestion names a text (its own or the section's global `text`) and a field. The text is analyzed
//! as the field's queries are (the field's analyzer in the first target index that maps it, or the one the
//! suggestion names; a keyword field's whole text is one term); each term gets its candidates from every
//! target index, merged by adding frequencies, and the suggester's rules pick and order them. The answer
//! lists, per suggestion, an entry per term: the term, its offset and length in the text (UTF-16 units, as
//! Elasticsearch counts) and its options (`text`, `score`, `freq`). The `phrase` and `completion`
//! suggesters are refused by name.

use crate::analyze::Utf16Offsets;
use crate::error::{ApiError, ApiResult};
use crate::Target;
use serde_json::{json, Map, Value};
use spirit::analysis::Analyzer;
use spirit::query::suggest::{select, wanted, Candidates, SuggestMode, SuggestSort, TermSuggestOptions};
use spirit::schema::FieldType;

/// Terms of a request's suggestions (all of them): each may read the field's dictionary near it (tens of
/// milliseconds on a large dictionary), so texts of a query's length are fine and a document's is refused.
pub const MAX_TERMS: usize = 64;

/// One parsed suggestion.
#[derive(Debug, Clone)]
pub struct TermSuggestion {
    name: String,
    text: String,
    field: String,
    /// An analyzer named by the suggestion (else the field's).
    analyzer: Option<String>,
    options: TermSuggestOptions,
}

/// Parses a `suggest` section.
pub fn parse(v: &Value) -> ApiResult<Vec<TermSuggestion>> {
    let obj = v.as_object().ok_or_else(|| ApiError::parsing("[suggest] must be an object"))?;
    let global = match obj.get("text") {
        None => None,
        Some(Value::String(t)) => Some(t.clone()),
        Some(_) => return Err(ApiError::parsing("[suggest] [text] must be a string")),
    };
    let mut out = vec![];
    for (name, def) in obj.iter().filter(|(k, _)| k.as_str() != "text") {
        let def = def
            .as_object()
            .ok_or_else(|| ApiError::parsing(format!("suggestion [{name}] must be an object")))?;
        let mut text = global.clone();
        let mut term = None;
        for (k, v) in def {
            match k.as_str() {
                "text" => {
                    text = Some(
                        v.as_str()
                            .ok_or_else(|| ApiError::parsing(format!("[{name}] [text] must be a string")))?
                            .into(),
                    )
                }
                "term" => term = Some(v),
                "phrase" | "completion" => {
                    return Err(ApiError::unsupported(format!("the [{k}] suggester (suggestion [{name}])")))
                }
                "prefix" | "regex" => {
                    return Err(ApiError::unsupported(format!("[{k}] in suggestion [{name}]")))
                }
                other => {
                    return Err(ApiError::parsing(format!("unknown key [{other}] in suggestion [{name}]")))
                }
            }
        }
        let term =
            term.ok_or_else(|| ApiError::parsing(format!("suggestion [{name}] names no suggester (term)")))?;
        let text = text.ok_or_else(|| ApiError::bad_request(format!("suggestion [{name}] has no text")))?;
        let (field, analyzer, options) = term_options(name, term)?;
        out.push(TermSuggestion { name: name.clone(), text, field, analyzer, options });
    }
    Ok(out)
}

/// A `term` suggester's body: its field, analyzer and options.
fn term_options(name: &str, v: &Value) -> ApiResult<(String, Option<String>, TermSuggestOptions)> {
    let obj = v.as_object().ok_or_else(|| ApiError::parsing(format!("[{name}] [term] must be an object")))?;
    let mut o = TermSuggestOptions::default();
    let (mut field, mut analyzer) = (None, None);
    let string = |k: &str, v: &Value| -> ApiResult<String> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| ApiError::parsing(format!("[{name}] [{k}] must be a string")))
    };
    let count = |k: &str, v: &Value| -> ApiResult<usize> {
        v.as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| ApiError::parsing(format!("[{name}] [{k}] must be a non-negative integer")))
    };
    let number = |k: &str, v: &Value| -> ApiResult<f64> {
        v.as_f64().ok_or_else(|| ApiError::parsing(format!("[{name}] [{k}] must be a number")))
    };
    for (k, v) in obj {
        match k.as_str() {
            "field" => field = Some(string(k, v)?),
            "analyzer" => analyzer = Some(string(k, v)?),
            "size" => o.size = count(k, v)?,
            "max_edits" => o.max_edits = count(k, v)?,
            "prefix_length" | "prefix_len" => o.prefix_length = count(k, v)?,
            "min_word_length" | "min_word_len" => o.min_word_length = count(k, v)?,
            "accuracy" => o.accuracy = number(k, v)? as f32,
            "min_doc_freq" => o.min_doc_freq = number(k, v)?,
            "max_term_freq" => o.max_term_freq = number(k, v)?,
            "suggest_mode" => {
                o.mode = match string(k, v)?.as_str() {
                    "missing" => SuggestMode::Missing,
                    "popular" => SuggestMode::Popular,
                    "always" => SuggestMode::Always,
                    other => {
                        return Err(ApiError::bad_request(format!("[{name}] illegal suggest_mode [{other}]")))
                    }
                }
            }
            "sort" => {
                o.sort = match string(k, v)?.as_str() {
                    "score" => SuggestSort::Score,
                    "frequency" => SuggestSort::Frequency,
                    other => return Err(ApiError::bad_request(format!("[{name}] illegal sort [{other}]"))),
                }
            }
            "string_distance" if v.as_str() == Some("internal") => {}
            "string_distance" => {
                return Err(ApiError::unsupported(format!("[{name}] string_distance {v} (only internal)")))
            }
            // Lucene's spell checker bounds the terms it inspects; spirit inspects every one (exact, and
            // the same whatever the shard count).
            "shard_size" | "max_inspections" => {
                count(k, v)?;
            }
            other => {
                return Err(ApiError::parsing(format!(
                    "unknown key [{other}] in the term suggester [{name}]"
                )))
            }
        }
    }
    o.validate().map_err(|e| ApiError::bad_request(format!("[{name}] {e}")))?;
    let field =
        field.ok_or_else(|| ApiError::bad_request(format!("the term suggester [{name}] needs a [field]")))?;
    Ok((field, analyzer, o))
}

/// How a suggestion's text is cut into terms.
enum Cut {
    Text(Analyzer),
    Whole,
}

/// The options of one term: its frequency first (from every target), and only when the suggester's rules
/// leave it wanting suggestions — long enough, missing or not too frequent — its neighbours.
fn options_for(s: &TermSuggestion, term: &str, targets: &[Target]) -> ApiResult<Value> {
    let mut c = Candidates::default();
    for t in targets {
        c.merge(t.index.suggest_term_stats(&s.field, term)?);
    }
    if wanted(term, &c, &s.options) {
        for t in targets {
            let near =
                t.index.suggest_near_terms(&s.field, term, s.options.max_edits, s.options.prefix_length)?;
            c.merge(Candidates { near, ..Default::default() });
        }
    }
    let options: Vec<Value> = select(term, &c, &s.options)
        .into_iter()
        // The score as Elasticsearch prints a float (0.8, not the f64 nearest to the f32).
        .map(|o| json!({"text": o.text, "score": o.score.to_string().parse::<f64>().ok(), "freq": o.freq}))
        .collect();
    Ok(Value::Array(options))
}

/// Runs the suggestions over `targets` and renders the `suggest` section.
pub fn run(suggestions: &[TermSuggestion], targets: &[Target]) -> ApiResult<Value> {
    let mut out = Map::new();
    let mut asked = 0;
    for s in suggestions {
        let cut = match &s.analyzer {
            Some(name) => {
                // An index's own analyzer name (the first index of the request that defines it), else a built-in.
                let index =
                    targets.iter().map(|t| &*t.index).find(|i| i.settings().analyzers.contains_key(name));
                Cut::Text(Analyzer::new(crate::indices::analyzer_named(index, name)?))
            }
            None => targets
                .iter()
                .find_map(|t| {
                    let schema = t.index.schema();
                    let f = schema.field_id(&s.field)?;
                    Some(match schema.field(f).ty {
                        FieldType::Keyword => Cut::Whole,
                        _ => Cut::Text(Analyzer::new(schema.search_analyzer(f).config())),
                    })
                })
                .unwrap_or_else(|| Cut::Text(Analyzer::new(Default::default()))),
        };
        // Listed only up to the bound (a long text is refused without its terms listed), counted all.
        let (mut terms, mut count): (Vec<(String, usize, usize)>, usize) = (vec![], 0);
        match &cut {
            Cut::Whole => {
                terms.push((s.text.clone(), 0, s.text.encode_utf16().count()));
                count = 1;
            }
            Cut::Text(a) => {
                let mut units = Utf16Offsets::new(&s.text);
                a.analyze_spans(&s.text, &mut |term, r| {
                    count += 1;
                    if asked + count <= MAX_TERMS {
                        let (start, end) = (units.at(r.start), units.at(r.end));
                        terms.push((term.to_string(), start, end - start));
                    }
                });
            }
        }
        asked += count;
        if asked > MAX_TERMS {
            return Err(ApiError::bad_request(format!(
                "the suggestions have {asked} terms or more; at most {MAX_TERMS} are suggested for in one request \
                 (each may read the field's dictionary)"
            )));
        }
        let mut entries = vec![];
        // A term repeated in the text is looked up once.
        let mut done: std::collections::HashMap<String, Value> = Default::default();
        for (term, offset, length) in terms {
            let options = match done.get(&term) {
                Some(o) => o.clone(),
                None => {
                    let o = options_for(s, &term, targets)?;
                    done.insert(term.clone(), o.clone());
                    o
                }
            };
            entries.push(json!({"text": term, "offset": offset, "length": length, "options": options}));
        }
        out.insert(s.name.clone(), Value::Array(entries));
    }
    Ok(Value::Object(out))
}
