//! `_analyze`: the tokens an analyzer makes of a text, as Elasticsearch lists them — to see why a query
//! matches or not (`"Running"` is `run` under `english`, nothing under `stop` if it is a stop word).
//!
//! The analyzer is named (`analyzer`: a built-in one, one the index defines in its `analysis` settings, or
//! `default` for an index's default), taken from a
//! mapped field (`field`, on `/{index}/_analyze`: a text field's analyzer, a keyword field's whole value as
//! one token), or built from `tokenizer` and `filter` as an index's `analysis` definitions are (the same
//! built-in equivalents; anything else is refused by name). Tokens carry the term, Elasticsearch's
//! `start_offset`/`end_offset` (UTF-16 code units into the text, as Java counts them), `type` and
//! `position`: exactly what indexing the text into that field would index, positions included (a removed
//! stop word leaves a gap; the values of a `text` array are [`POSITION_GAP`] positions and one offset apart).

use crate::error::{ApiError, ApiResult};
use crate::indices::{analyzer_named, resolve_analyzer};
use serde_json::{json, Map, Value};
use spirit::analysis::Analyzer;
use spirit::schema::document::POSITION_GAP;
use spirit::schema::{analyzer_config, FieldType};
use spirit::Index;

/// Most tokens one request lists (Elasticsearch's `index.analyze.max_token_count` default).
pub const MAX_TOKENS: usize = 10_000;

/// How the text is analyzed.
enum Chain {
    Text(Analyzer),
    /// A keyword field: the whole value is the token.
    Keyword,
}

/// Answers an `_analyze` request, on `index` when the path names one.
pub fn analyze(index: Option<&Index>, body: &Value) -> ApiResult<Value> {
    let obj = body.as_object().ok_or_else(|| ApiError::parsing("request body must be a JSON object"))?;
    for k in obj.keys() {
        match k.as_str() {
            "text" | "analyzer" | "field" | "tokenizer" | "filter" => {}
            "explain" | "attributes" | "char_filter" | "normalizer" => {
                return Err(ApiError::unsupported(format!("the _analyze option [{k}]")))
            }
            _ => return Err(ApiError::parsing(format!("unknown key [{k}] in the analyze request"))),
        }
    }
    let texts: Vec<&str> = match obj.get("text") {
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str().ok_or_else(|| ApiError::parsing("[text] must be a string or an array of strings"))
            })
            .collect::<ApiResult<_>>()?,
        Some(_) => return Err(ApiError::parsing("[text] must be a string or an array of strings")),
        None => return Err(validation("text is missing")),
    };
    let str_of = |k: &str| -> ApiResult<Option<&str>> {
        obj.get(k)
            .map(|v| v.as_str().ok_or_else(|| ApiError::parsing(format!("[{k}] must be a string"))))
            .transpose()
    };
    let default = || -> ApiResult<Analyzer> {
        let name =
            index.and_then(|i| i.settings().default_analyzer.clone()).unwrap_or_else(|| "standard".into());
        Ok(Analyzer::new(analyzer_config(&name)?))
    };
    if obj.contains_key("filter") && !obj.contains_key("tokenizer") {
        return Err(validation("[filter] needs a [tokenizer]"));
    }
    let chain = match (str_of("analyzer")?, str_of("field")?, obj.get("tokenizer")) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
            return Err(validation("give one of [analyzer], [field] and [tokenizer]"))
        }
        (Some("default"), ..) => Chain::Text(default()?),
        (Some(name), ..) => Chain::Text(Analyzer::new(analyzer_named(index, name)?)),
        (None, Some(field), _) => {
            let index = index.ok_or_else(|| validation("[field] needs an index: /{index}/_analyze"))?;
            let schema = index.schema();
            match schema.field_id(field) {
                // An unmapped field gets the index's default analyzer, as a dynamically mapped one would.
                None => Chain::Text(default()?),
                Some(f) => match schema.field(f).ty {
                    FieldType::Text => Chain::Text(Analyzer::new(schema.analyzer(f).config())),
                    FieldType::Keyword => Chain::Keyword,
                    _ => {
                        return Err(ApiError::bad_request(format!(
                            "Can't process field [{field}], Analysis requests are only supported on tokenized fields"
                        )))
                    }
                },
            }
        }
        (None, None, Some(tokenizer)) => {
            let mut def = Map::new();
            def.insert("tokenizer".into(), tokenizer.clone());
            if let Some(f) = obj.get("filter") {
                def.insert("filter".into(), f.clone());
            }
            Chain::Text(Analyzer::new(analyzer_config(&resolve_analyzer("_analyze", &def)?)?))
        }
        (None, None, None) => Chain::Text(default()?),
    };
    let mut tokens = vec![];
    let too_many = || {
        ApiError::bad_request(format!(
            "The number of tokens produced by calling _analyze has exceeded the allowed maximum of [{MAX_TOKENS}]. \
             This limit can be set by changing the [index.analyze.max_token_count] index level setting."
        ))
    };
    let (mut next_position, mut offset) = (0u32, 0usize);
    for text in texts {
        let start = if next_position == 0 { 0 } else { next_position.saturating_add(POSITION_GAP) };
        // Counted before any token is listed: a text of millions of tokens is refused without them.
        let room = MAX_TOKENS - tokens.len();
        match &chain {
            Chain::Keyword => {
                if room == 0 {
                    return Err(too_many());
                }
                tokens.push(token(text, offset, offset + utf16_len(text), "word", start));
                next_position = start.saturating_add(1);
            }
            Chain::Text(a) => {
                let (mut positions, mut over) = (vec![], false);
                next_position = a.analyze_from(text, start, &mut |_, p| {
                    over |= positions.len() == room;
                    if !over {
                        positions.push(p);
                    }
                });
                if over {
                    return Err(too_many());
                }
                let mut i = 0;
                // The same terms in the same order, with their byte ranges ([`Analyzer::analyze_spans`]).
                let mut units = Utf16Offsets::new(text);
                a.analyze_spans(text, &mut |term, r| {
                    let (s, e) = (units.at(r.start), units.at(r.end));
                    let kind =
                        if text[r].bytes().all(|b| b.is_ascii_digit()) { "<NUM>" } else { "<ALPHANUM>" };
                    tokens.push(token(term, offset + s, offset + e, kind, positions[i]));
                    i += 1;
                });
                assert_eq!(i, positions.len(), "analyze_spans yields the terms of analyze");
            }
        }
        // Lucene's offset gap between values.
        offset += utf16_len(text) + 1;
    }
    Ok(json!({ "tokens": tokens }))
}

fn token(term: &str, start: usize, end: usize, kind: &str, position: u32) -> Value {
    json!({"token": term, "start_offset": start, "end_offset": end, "type": kind, "position": position})
}

fn validation(reason: &str) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::BAD_REQUEST,
        "action_request_validation_exception",
        format!("Validation Failed: 1: {reason};"),
    )
}

fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Byte offsets of a text as UTF-16 offsets, for increasing byte offsets (one pass over the text).
pub(crate) struct Utf16Offsets<'a> {
    text: &'a str,
    byte: usize,
    unit: usize,
}

impl<'a> Utf16Offsets<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        Utf16Offsets { text, byte: 0, unit: 0 }
    }

    /// The UTF-16 offset of byte offset `b` (a char boundary, at least the one asked for before).
    pub(crate) fn at(&mut self, b: usize) -> usize {
        assert!(b >= self.byte, "offsets asked in increasing order");
        self.unit += utf16_len(&self.text[self.byte..b]);
        self.byte = b;
        self.unit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(body: Value) -> Vec<(String, usize, usize, String, u64)> {
        let v = analyze(None, &body).unwrap();
        v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["token"].as_str().unwrap().into(),
                    t["start_offset"].as_u64().unwrap() as usize,
                    t["end_offset"].as_u64().unwrap() as usize,
                    t["type"].as_str().unwrap().into(),
                    t["position"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn tokens_carry_offsets_types_and_positions() {
        let t = |s: &str, a: usize, b: usize, k: &str, p: u64| (s.to_string(), a, b, k.to_string(), p);
        assert_eq!(
            tokens(json!({"analyzer": "english", "text": "The Running dogs of 2015"})),
            [
                t("run", 4, 11, "<ALPHANUM>", 1),
                t("dog", 12, 16, "<ALPHANUM>", 2),
                t("2015", 20, 24, "<NUM>", 4)
            ]
        );
        // Offsets in UTF-16 units (é is one, 😀 two), an array's values 100 positions and one offset apart.
        assert_eq!(
            tokens(json!({"text": ["😀 Café", "b"]})),
            [t("café", 3, 7, "<ALPHANUM>", 0), t("b", 8, 9, "<ALPHANUM>", 101)]
        );
        // Built from a tokenizer and filters as index definitions are.
        let built =
            tokens(json!({"tokenizer": "standard", "filter": ["lowercase", "stop"], "text": "The Cat"}));
        assert_eq!(built, [t("cat", 4, 7, "<ALPHANUM>", 1)]);
    }

    #[test]
    fn bad_requests_are_refused_by_name() {
        let reason = |body: Value| analyze(None, &body).unwrap_err().reason;
        assert!(reason(json!({"analyzer": "english"})).contains("text is missing"));
        assert!(reason(json!({"analyzer": "nope", "text": "x"})).contains("failed to find analyzer [nope]"));
        assert!(reason(json!({"field": "body", "text": "x"})).contains("needs an index"));
        assert!(reason(json!({"analyzer": "english", "field": "b", "text": "x"})).contains("give one of"));
        assert!(
            reason(json!({"tokenizer": "whitespace", "text": "x"})).contains("tokenizer other than standard")
        );
        assert!(reason(json!({"explain": true, "text": "x"})).contains("not supported"));
        assert!(reason(json!({"text": 3})).contains("must be a string"));
        assert!(reason(json!({"analyzer": "english", "filter": ["stop"], "text": "x"}))
            .contains("needs a [tokenizer]"));
        let exactly = "a ".repeat(MAX_TOKENS);
        assert_eq!(
            analyze(None, &json!({"text": exactly})).unwrap()["tokens"].as_array().unwrap().len(),
            MAX_TOKENS
        );
        let spread = vec!["a"; MAX_TOKENS + 1];
        assert!(reason(json!({"text": spread})).contains("exceeded the allowed maximum"));
        let many = "a ".repeat(MAX_TOKENS + 1);
        assert!(reason(json!({"text": many})).contains("exceeded the allowed maximum"));
    }
}
