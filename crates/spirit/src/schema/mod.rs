//! Schema: the fields of an index and how a JSON document maps onto them.
//!
//! Field types follow Elasticsearch: `text` (analyzed, with frequencies and positions), `keyword` (exact
//! term), `long`/`double` (numeric: stored in a column, range-filterable, sortable) and `date` (a numeric
//! column of epoch milliseconds). Unknown fields are mapped dynamically as Elasticsearch does: a string
//! becomes `text` (or `date` when it looks like an ISO date), a number `long`/`double`, a boolean `keyword`;
//! objects are flattened with dotted names and arrays make multi-valued fields.

mod date;
pub mod document;
mod source;

pub use date::{format_date_millis, parse_date_millis, CalendarUnit};
pub use document::{analyze_document, analyze_document_into, AnalyzedDoc, BlockTerms};
pub use source::{simple_match, SourceFilter};

use crate::analysis::{Analyzer, AnalyzerConfig};
use crate::codec::{DocCodec, FieldCodecs};
use crate::error::{Error, Result};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Fields users may map: Elasticsearch's default field limit.
pub const MAX_USER_FIELDS: usize = 1000;
/// Field ids in all (u16, stored in term keys; a fresh segment has a column slot per id): the user fields and
/// the hidden columns (`_seq`, `_version`), which do not count against [`MAX_USER_FIELDS`].
pub const MAX_FIELDS: usize = MAX_USER_FIELDS + 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    Text,
    Keyword,
    Long,
    Double,
    Date,
}

impl FieldType {
    /// Whether the field has postings (text, keyword) rather than a numeric column.
    pub fn is_indexed_terms(self) -> bool {
        matches!(self, FieldType::Text | FieldType::Keyword)
    }
    pub fn is_numeric(self) -> bool {
        !self.is_indexed_terms()
    }
    pub fn from_es(name: &str) -> Option<FieldType> {
        Some(match name {
            "text" | "match_only_text" => FieldType::Text,
            "keyword" | "boolean" | "constant_keyword" | "wildcard" => FieldType::Keyword,
            "long" | "integer" | "short" | "byte" | "unsigned_long" => FieldType::Long,
            "double" | "float" | "half_float" | "scaled_float" => FieldType::Double,
            "date" | "date_nanos" => FieldType::Date,
            _ => return None,
        })
    }
    pub fn es_name(self) -> &'static str {
        match self {
            FieldType::Text => "text",
            FieldType::Keyword => "keyword",
            FieldType::Long => "long",
            FieldType::Double => "double",
            FieldType::Date => "date",
        }
    }
}

/// One field of the schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldDef {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: FieldType,
    /// Analyzer name for text fields: `standard` (lowercase words) or `english` (plus stop words and
    /// Snowball stemming).
    #[serde(default = "standard")]
    pub analyzer: String,
    /// The analyzer of query text on a text field (mapping `search_analyzer`), when not `analyzer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_analyzer: Option<String>,
    /// How the full posting blocks of a text or keyword field code their doc ids (mapping
    /// `postings_codec`: `bitpacked`, the default, `raw`, `vbyte`, `streamvbyte` or `pfor`).
    #[serde(default, skip_serializing_if = "is_default_codec")]
    pub postings_codec: DocCodec,
    /// A multi-field's parent (mapping `fields`): the field whose values this one indexes too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub of: Option<String>,
    /// A keyword field's values longer than this many characters are not indexed (mapping `ignore_above`;
    /// `_source` keeps them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_above: Option<u32>,
}

fn is_default_codec(c: &DocCodec) -> bool {
    *c == DocCodec::default()
}

fn standard() -> String {
    "standard".into()
}

/// Resolves an analyzer name to its configuration.
pub fn analyzer_config(name: &str) -> Result<AnalyzerConfig> {
    Ok(match name {
        "standard" | "simple" | "default" => AnalyzerConfig { stop_words: false, stemming: false },
        "english" => AnalyzerConfig { stop_words: true, stemming: true },
        "stop" => AnalyzerConfig { stop_words: true, stemming: false },
        "stemming" => AnalyzerConfig { stop_words: false, stemming: true },
        other => {
            return Err(Error::InvalidArgument(format!(
                "unknown analyzer [{other}]; use standard, english, stop or stemming"
            )))
        }
    })
}

/// The configuration of a field's query analyzer: its `search_analyzer`, else its `analyzer`.
fn search_config(def: &FieldDef) -> Result<AnalyzerConfig> {
    analyzer_config(def.search_analyzer.as_deref().unwrap_or(&def.analyzer))
}

/// The schema of an index. Field ids are positions in `fields` and never change.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Schema {
    fields: Vec<FieldDef>,
    /// Fields searched by terms without a `field:` prefix; `None` means every text field.
    #[serde(default)]
    pub default_fields: Option<Vec<String>>,
    /// Map unknown fields on first sight (Elasticsearch `dynamic: true`); otherwise they are stored in
    /// `_source` but not indexed.
    #[serde(default = "yes")]
    pub dynamic: bool,
    /// Analyzer of text fields added without one (mappings without `analyzer`, dynamic fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_analyzer: Option<String>,
    /// What of each document is stored as `_source` (Elasticsearch's `_source` mapping).
    #[serde(default)]
    pub source: SourceFilter,
    #[serde(skip)]
    by_name: FxHashMap<String, u16>,
    #[serde(skip)]
    analyzers: Vec<Arc<Analyzer>>,
    /// Each field's query analyzer ([`FieldDef::search_analyzer`], else its `analyzer`).
    #[serde(skip)]
    search_analyzers: Vec<Arc<Analyzer>>,
    /// Each field's multi-fields ([`FieldDef::of`]), by id.
    #[serde(skip)]
    multi_fields: Vec<Vec<u16>>,
}

fn yes() -> bool {
    true
}

impl Default for Schema {
    fn default() -> Self {
        Schema {
            fields: vec![],
            default_fields: None,
            dynamic: true,
            default_analyzer: None,
            source: SourceFilter::default(),
            by_name: FxHashMap::default(),
            analyzers: vec![],
            search_analyzers: vec![],
            multi_fields: vec![],
        }
    }
}

impl Schema {
    /// Rebuilds derived lookup tables (after deserialization).
    pub fn rebuild(mut self) -> Result<Schema> {
        let fields = std::mem::take(&mut self.fields);
        for f in fields {
            if f.name == SEQ_FIELD {
                self.seq_field()?;
            } else if f.name == VERSION_FIELD {
                self.version_field()?;
            } else {
                self.add_field(f)?;
            }
        }
        Ok(self)
    }

    pub fn fields(&self) -> &[FieldDef] {
        &self.fields
    }

    /// The id of a user field (never a hidden column, `_seq` or `_version`: documents, queries and sorts
    /// cannot name them).
    pub fn field_id(&self, name: &str) -> Option<u16> {
        if is_hidden(name) {
            return None;
        }
        self.by_name.get(name).copied()
    }

    pub fn field(&self, id: u16) -> &FieldDef {
        &self.fields[id as usize]
    }

    /// The analyzer field `id`'s values are indexed with.
    pub fn analyzer(&self, id: u16) -> &Arc<Analyzer> {
        &self.analyzers[id as usize]
    }

    /// The analyzer of query text on field `id` (its `search_analyzer`, else [`analyzer`](Self::analyzer)).
    pub fn search_analyzer(&self, id: u16) -> &Arc<Analyzer> {
        &self.search_analyzers[id as usize]
    }

    /// The multi-fields of field `id` (mapping `fields`), which index its values too.
    pub fn multi_fields(&self, id: u16) -> &[u16] {
        &self.multi_fields[id as usize]
    }

    /// Where field `id`'s values lie in a document: its own name, or a multi-field's parent's.
    pub fn source_path(&self, id: u16) -> &str {
        let f = &self.fields[id as usize];
        f.of.as_deref().unwrap_or(&f.name)
    }

    /// Adds a field; an existing field of the same name and type is fine, another type is an error. An
    /// existing field's `search_analyzer` and `ignore_above` take the new mapping's (Elasticsearch updates
    /// them; they only change later queries and later documents); its other parameters must be unchanged.
    pub fn add_field(&mut self, def: FieldDef) -> Result<u16> {
        if def.name.is_empty() || def.name.starts_with('_') {
            return Err(Error::InvalidArgument(format!("field name [{}] is empty or reserved", def.name)));
        }
        if let Some(&id) = self.by_name.get(&def.name) {
            let old = &self.fields[id as usize];
            if old.ty != def.ty {
                return Err(Error::InvalidArgument(format!(
                    "mapper [{}] cannot be changed from type [{}] to [{}]",
                    def.name,
                    old.ty.es_name(),
                    def.ty.es_name()
                )));
            }
            // Elasticsearch refuses the change too; keeping the old one silently would surprise. Names of one
            // analyzer (`standard`, `default`) are the same.
            if old.ty == FieldType::Text && analyzer_config(&old.analyzer)? != analyzer_config(&def.analyzer)?
            {
                return Err(Error::InvalidArgument(format!(
                    "mapper [{}] cannot change [analyzer] from [{}] to [{}]",
                    def.name, old.analyzer, def.analyzer
                )));
            }
            if old.of != def.of {
                let of = |o: &Option<String>| o.as_ref().map_or("none".to_string(), |p| format!("[{p}]"));
                return Err(Error::InvalidArgument(format!(
                    "mapper [{}] cannot change from a multi-field of {} to one of {}",
                    def.name,
                    of(&old.of),
                    of(&def.of)
                )));
            }
            if old.postings_codec != def.postings_codec {
                return Err(Error::InvalidArgument(format!(
                    "mapper [{}] cannot change [postings_codec] from [{}] to [{}]",
                    def.name,
                    old.postings_codec.name(),
                    def.postings_codec.name()
                )));
            }
            self.search_analyzers[id as usize] = Arc::new(Analyzer::new(search_config(&def)?));
            let f = &mut self.fields[id as usize];
            (f.search_analyzer, f.ignore_above) = (def.search_analyzer, def.ignore_above);
            return Ok(id);
        }
        self.insert_field(def)
    }

    /// The hidden `_seq` column of a sharded index (a reserved name users cannot map).
    pub(crate) fn seq_field(&mut self) -> Result<u16> {
        self.hidden_column(SEQ_FIELD)
    }

    /// The hidden `_version` column of every index (a reserved name users cannot map).
    pub(crate) fn version_field(&mut self) -> Result<u16> {
        self.hidden_column(VERSION_FIELD)
    }

    fn hidden_column(&mut self, name: &str) -> Result<u16> {
        debug_assert!(is_hidden(name));
        if let Some(&id) = self.by_name.get(name) {
            return Ok(id);
        }
        self.insert_field(FieldDef {
            name: name.into(),
            ty: FieldType::Long,
            analyzer: standard(),
            search_analyzer: None,
            postings_codec: DocCodec::default(),
            of: None,
            ignore_above: None,
        })
    }

    /// The id of hidden column `name` ([`SEQ_FIELD`], [`VERSION_FIELD`]), if the index has it.
    pub(crate) fn hidden_field(&self, name: &str) -> Option<u16> {
        debug_assert!(is_hidden(name));
        self.by_name.get(name).copied()
    }

    /// The fields users mapped (every field but the hidden columns), with their ids.
    pub fn user_fields(&self) -> impl Iterator<Item = (u16, &FieldDef)> {
        self.fields.iter().enumerate().filter(|(_, f)| !is_hidden(&f.name)).map(|(i, f)| (i as u16, f))
    }

    fn insert_field(&mut self, def: FieldDef) -> Result<u16> {
        let full = match is_hidden(&def.name) {
            true => self.fields.len() >= MAX_FIELDS,
            false => self.user_fields().count() >= MAX_USER_FIELDS,
        };
        if full {
            return Err(Error::InvalidArgument(format!(
                "limit of total fields [{MAX_USER_FIELDS}] has been exceeded while adding [{}]",
                def.name
            )));
        }
        assert!(self.fields.len() < MAX_FIELDS, "at most two hidden columns beside the user fields");
        let cfg = analyzer_config(&def.analyzer)?;
        let search_cfg = search_config(&def)?;
        let parent = match &def.of {
            None => None,
            Some(p) => Some(*self.by_name.get(p).ok_or_else(|| {
                Error::InvalidArgument(format!("multi-field [{}] of unknown field [{p}]", def.name))
            })?),
        };
        let id = self.fields.len() as u16;
        self.by_name.insert(def.name.clone(), id);
        self.analyzers.push(Arc::new(Analyzer::new(cfg)));
        self.search_analyzers.push(Arc::new(Analyzer::new(search_cfg)));
        self.multi_fields.push(vec![]);
        if let Some(p) = parent {
            self.multi_fields[p as usize].push(id);
        }
        self.fields.push(def);
        Ok(id)
    }

    /// Parses Elasticsearch `mappings` (`{"properties": {"title": {"type": "text"}}}`), with nested
    /// `properties` flattened to dotted names.
    pub fn from_mappings(mappings: &serde_json::Value) -> Result<Schema> {
        let mut s = Schema::default();
        s.apply_mappings(mappings)?;
        Ok(s)
    }

    /// Adds the fields of an Elasticsearch `mappings` object.
    pub fn apply_mappings(&mut self, mappings: &serde_json::Value) -> Result<()> {
        if let Some(d) = mappings.get("dynamic") {
            self.dynamic = !matches!(d, serde_json::Value::Bool(false)) && d.as_str() != Some("false");
        }
        if let Some(f) = mappings.get("_source") {
            self.source = SourceFilter::from_mapping(f)?;
        }
        fn walk(s: &mut Schema, prefix: &str, props: &serde_json::Value) -> Result<()> {
            let Some(obj) = props.as_object() else {
                return Err(Error::InvalidArgument("[properties] must be an object".into()));
            };
            for (name, def) in obj {
                let full = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
                if let Some(p) = def.get("properties") {
                    if def.get("fields").is_some() {
                        return Err(Error::InvalidArgument(format!(
                            "object [{full}] cannot have multi-fields ([fields])"
                        )));
                    }
                    walk(s, &full, p)?;
                    continue;
                }
                let field = parse_field(s, &full, def, None)?;
                s.add_field(field)?;
                // Multi-fields: `full.sub`, indexing the values of `full` (each its own field to queries,
                // sorts and aggregations), added after it.
                match def.get("fields") {
                    None => {}
                    Some(serde_json::Value::Object(subs)) => {
                        for (sub, sub_def) in subs {
                            if sub_def.get("fields").is_some() || sub_def.get("properties").is_some() {
                                return Err(Error::InvalidArgument(format!(
                                    "multi-field [{full}.{sub}] cannot have [fields] or [properties] of its own"
                                )));
                            }
                            let field = parse_field(s, &format!("{full}.{sub}"), sub_def, Some(&full))?;
                            s.add_field(field)?;
                        }
                    }
                    Some(other) => {
                        return Err(Error::InvalidArgument(format!(
                            "[fields] of field [{full}] must be an object of multi-fields, got {other}"
                        )))
                    }
                }
            }
            Ok(())
        }
        /// The field `full` (a multi-field of `of`, if given) as mapping `def` declares it.
        fn parse_field(
            s: &Schema,
            full: &str,
            def: &serde_json::Value,
            of: Option<&str>,
        ) -> Result<FieldDef> {
            let ty_name = def.get("type").and_then(|t| t.as_str()).unwrap_or("object");
            let Some(ty) = FieldType::from_es(ty_name) else {
                return Err(Error::InvalidArgument(format!(
                    "no handler for type [{ty_name}] declared on field [{full}]"
                )));
            };
            // Parameters that would change what a field matches, refused by name rather than ignored.
            for (key, what) in [
                ("copy_to", "[copy_to]"),
                ("null_value", "[null_value]"),
                ("normalizer", "[normalizer]"),
                ("search_quote_analyzer", "[search_quote_analyzer]"),
            ] {
                if def.get(key).is_some() {
                    return Err(Error::InvalidArgument(format!(
                        "{what} is not supported (field [{full}]): map each field on its own"
                    )));
                }
            }
            let flag = |key: &str| def.get(key).and_then(|v| v.as_bool().or(v.as_str().map(|s| s == "true")));
            if flag("index") == Some(false) {
                return Err(Error::InvalidArgument(format!(
                    "[index: false] is not supported (field [{full}]): every mapped field is indexed"
                )));
            }
            // Scoring keeps field lengths and term frequencies: a mapping without them would score otherwise.
            if ty == FieldType::Text && flag("norms") == Some(false) {
                return Err(Error::InvalidArgument(format!(
                    "[norms: false] is not supported (field [{full}]): text fields are scored with their lengths"
                )));
            }
            if let Some(o) =
                def.get("index_options").filter(|o| !matches!(o.as_str(), Some("positions" | "offsets")))
            {
                return Err(Error::InvalidArgument(format!(
                    "[index_options] {o} is not supported (field [{full}]): text fields index positions"
                )));
            }
            let name_of = |key: &str| -> Result<Option<String>> {
                match def.get(key) {
                    None | Some(serde_json::Value::Null) => Ok(None),
                    Some(serde_json::Value::String(a)) => Ok(Some(a.clone())),
                    Some(other) => Err(Error::InvalidArgument(format!(
                        "[{key}] of field [{full}] must be an analyzer's name, got {other}"
                    ))),
                }
            };
            let search_analyzer = name_of("search_analyzer")?;
            let analyzer = name_of("analyzer")?;
            if search_analyzer.is_some() && (ty != FieldType::Text || analyzer.is_none()) {
                return Err(Error::InvalidArgument(format!(
                    "[search_analyzer] of field [{full}] needs a text field with an [analyzer], as in \
                     Elasticsearch"
                )));
            }
            let analyzer = analyzer.unwrap_or_else(|| s.default_analyzer().to_string());
            let ignore_above = match def.get("ignore_above") {
                None | Some(serde_json::Value::Null) => None,
                Some(n) if ty == FieldType::Keyword => {
                    Some(n.as_u64().filter(|&n| n <= u32::MAX as u64).ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "[ignore_above] of field [{full}] must be a whole number of characters, got {n}"
                        ))
                    })? as u32)
                }
                Some(_) => {
                    return Err(Error::InvalidArgument(format!(
                        "[ignore_above] applies to keyword fields, not [{}] field [{full}]",
                        ty.es_name()
                    )))
                }
            };
            let postings_codec = match def.get("postings_codec") {
                None => DocCodec::default(),
                Some(c) => {
                    let codec = c.as_str().and_then(DocCodec::from_name).ok_or_else(|| {
                        let names: Vec<&str> = DocCodec::ALL.iter().map(|c| c.name()).collect();
                        Error::InvalidArgument(format!(
                            "unknown [postings_codec] {c} on field [{full}]; use one of {}",
                            names.join(", ")
                        ))
                    })?;
                    if !ty.is_indexed_terms() {
                        return Err(Error::InvalidArgument(format!(
                            "[postings_codec] applies to text and keyword fields, not [{}] field [{full}]",
                            ty.es_name()
                        )));
                    }
                    codec
                }
            };
            Ok(FieldDef {
                name: full.to_string(),
                ty,
                analyzer,
                search_analyzer,
                postings_codec,
                of: of.map(str::to_string),
                ignore_above,
            })
        }
        if let Some(props) = mappings.get("properties") {
            walk(self, "", props)?;
        }
        Ok(())
    }

    /// The analyzer of text fields added without one.
    pub fn default_analyzer(&self) -> &str {
        self.default_analyzer.as_deref().unwrap_or("standard")
    }

    /// The mappings in Elasticsearch form.
    pub fn to_mappings(&self) -> serde_json::Value {
        let mut props = serde_json::Map::new();
        let def_of = |f: &FieldDef| {
            let mut def = serde_json::json!({ "type": f.ty.es_name() });
            // Unless it is `standard` in an index whose default is too: a mapping without it would read
            // otherwise where the index has a default of its own.
            let implied = f.analyzer == "standard" && self.default_analyzer() == "standard";
            if f.ty == FieldType::Text && (!implied || f.search_analyzer.is_some()) {
                def["analyzer"] = f.analyzer.clone().into();
            }
            if let Some(n) = f.ignore_above {
                def["ignore_above"] = n.into();
            }
            if let Some(a) = &f.search_analyzer {
                def["search_analyzer"] = a.clone().into();
            }
            if f.postings_codec != DocCodec::default() {
                def["postings_codec"] = f.postings_codec.name().into();
            }
            def
        };
        for (id, f) in self.user_fields().filter(|(_, f)| f.of.is_none()) {
            let mut def = def_of(f);
            for &m in self.multi_fields(id) {
                let sub = &self.fields[m as usize];
                let name = sub.name.strip_prefix(&format!("{}.", f.name)).unwrap_or(&sub.name).to_string();
                def["fields"][name] = def_of(sub);
            }
            props.insert(f.name.clone(), def);
        }
        let mut m = serde_json::json!({ "dynamic": self.dynamic, "properties": props });
        if let Some(f) = self.source.to_mapping() {
            m["_source"] = f;
        }
        m
    }

    /// Each field's postings codec, by field id.
    pub fn field_codecs(&self) -> FieldCodecs {
        FieldCodecs(self.fields.iter().map(|f| f.postings_codec).collect())
    }

    /// The fields an unqualified query term searches.
    pub fn default_search_fields(&self) -> Vec<u16> {
        match &self.default_fields {
            Some(names) => names.iter().filter_map(|n| self.field_id(n)).collect(),
            None => (0..self.fields.len() as u16)
                .filter(|&i| self.fields[i as usize].ty == FieldType::Text)
                .collect(),
        }
    }
}

/// The hidden numeric column holding each document's index-wide sequence number in a sharded index (not
/// part of the mappings users see).
pub const SEQ_FIELD: &str = "_seq";

/// The hidden numeric column holding each document's `_version`: 1 for the first write of an `_id`, one more
/// for each write after it (or the version an external versioning write gives).
pub const VERSION_FIELD: &str = "_version";

/// Whether `name` is a hidden column's.
fn is_hidden(name: &str) -> bool {
    name == SEQ_FIELD || name == VERSION_FIELD
}

/// The key of a term in every dictionary: the field id (big-endian, so keys group by field when sorted)
/// followed by the term's bytes.
pub fn term_key(field: u16, term: &str, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&field.to_be_bytes());
    out.extend_from_slice(term.as_bytes());
}

/// The field id of a term key.
pub fn key_field(key: &[u8]) -> u16 {
    u16::from_be_bytes([key[0], key[1]])
}

/// Hash of the term key of token `tok` in field `fid` (see [`term_key`]): the field and the token are hashed
/// apart, so analysis hashes a token, and looks it up, without building its key; [`key_hash`] gives the same
/// from a whole key. In-memory tables only (a document's terms, the fresh segment's dictionary): never
/// persisted, so it may change between versions.
pub(crate) fn term_hash(fid: u16, tok: &[u8]) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = rustc_hash::FxBuildHasher.build_hasher();
    h.write_u16(fid);
    h.write(tok);
    h.finish()
}

/// [`term_hash`] of a whole term key. Total: a byte string too short to hold a field (never a key analysis
/// makes) hashes as a token of no field.
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    match key {
        [a, b, tok @ ..] => term_hash(u16::from_be_bytes([*a, *b]), tok),
        short => term_hash(u16::MAX, short),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_round_trip_and_conflicts() {
        let m = serde_json::json!({"properties": {
            "title": {"type": "text", "analyzer": "english"},
            "meta": {"properties": {"tag": {"type": "keyword"}}},
            "n": {"type": "integer"}, "when": {"type": "date"}}});
        let mut s = Schema::from_mappings(&m).unwrap();
        assert_eq!(s.field(s.field_id("meta.tag").unwrap()).ty, FieldType::Keyword);
        assert_eq!(s.field(s.field_id("n").unwrap()).ty, FieldType::Long);
        let again = Schema::from_mappings(&s.to_mappings()).unwrap();
        assert_eq!(again.fields(), s.fields());
        let err = s
            .add_field(FieldDef {
                name: "n".into(),
                ty: FieldType::Text,
                analyzer: standard(),
                search_analyzer: None,
                postings_codec: DocCodec::default(),
                of: None,
                ignore_above: None,
            })
            .unwrap_err();
        assert!(err.to_string().contains("cannot be changed"), "{err}");
        assert!(
            Schema::from_mappings(&serde_json::json!({"properties": {"x": {"type": "geo_shape"}}})).is_err()
        );
        let json = serde_json::to_string(&s).unwrap();
        let back: Schema = serde_json::from_str::<Schema>(&json).unwrap().rebuild().unwrap();
        assert_eq!(back.field_id("title"), s.field_id("title"));
    }

    /// `search_analyzer` sets a text field's query analyzer apart from its index one (needing an `analyzer`,
    /// as in Elasticsearch), survives the mappings' and the schema's round trips, and neither analyzer of a
    /// field changes once mapped; parameters that would change what a field matches are refused by name.
    #[test]
    fn search_analyzers_and_refused_mapping_parameters() {
        let m = serde_json::json!({"properties": {
            "s": {"type": "text", "analyzer": "english", "search_analyzer": "standard"},
            "t": {"type": "text", "analyzer": "english"}}});
        let s = Schema::from_mappings(&m).unwrap();
        let (sf, tf) = (s.field_id("s").unwrap(), s.field_id("t").unwrap());
        assert_eq!(s.analyzer(sf).config(), AnalyzerConfig::english());
        assert_eq!(s.search_analyzer(sf).config(), AnalyzerConfig::simple());
        assert_eq!(s.search_analyzer(tf).config(), AnalyzerConfig::english());
        assert_eq!(s.to_mappings()["properties"]["s"], m["properties"]["s"]);
        let again = Schema::from_mappings(&s.to_mappings()).unwrap();
        assert_eq!(again.fields(), s.fields());
        let json = serde_json::to_string(&s).unwrap();
        let back: Schema = serde_json::from_str::<Schema>(&json).unwrap().rebuild().unwrap();
        assert_eq!(back.search_analyzer(sf).config(), AnalyzerConfig::simple());
        let err = |m: serde_json::Value| Schema::from_mappings(&m).unwrap_err().to_string();
        assert!(err(
            serde_json::json!({"properties": {"x": {"type": "text", "search_analyzer": "english"}}})
        )
        .contains("needs a text field with an [analyzer]"));
        assert!(err(serde_json::json!({"properties": {"x": {"type": "keyword", "analyzer": "standard",
            "search_analyzer": "english"}}}))
        .contains("needs a text field"));
        assert!(err(serde_json::json!({"properties": {"x": {"type": "text", "analyzer": 3}}}))
            .contains("[analyzer]"));
        for (def, what) in [
            (serde_json::json!({"type": "text", "copy_to": "all"}), "copy_to"),
            (serde_json::json!({"type": "keyword", "null_value": "NULL"}), "null_value"),
            (serde_json::json!({"type": "keyword", "normalizer": "lower"}), "[normalizer]"),
            (
                serde_json::json!({"type": "text", "search_quote_analyzer": "standard"}),
                "search_quote_analyzer",
            ),
            (serde_json::json!({"type": "long", "index": false}), "[index: false]"),
            (serde_json::json!({"type": "text", "norms": false}), "[norms: false]"),
            (serde_json::json!({"type": "text", "index_options": "docs"}), "[index_options]"),
        ] {
            let e = err(serde_json::json!({"properties": {"x": def}}));
            assert!(e.contains(what) && e.contains("[x]"), "{e}");
        }
        // `index: true` changes nothing.
        assert!(Schema::from_mappings(
            &serde_json::json!({"properties": {"x": {"type": "long", "index": true}}})
        )
        .is_ok());
        // A mapped text field's analyzer stays; its search analyzer takes the new mapping's (none: the
        // analyzer), as Elasticsearch updates it.
        let mut s = s;
        let def = |a: &str, sa: Option<&str>| FieldDef {
            name: "s".into(),
            ty: FieldType::Text,
            analyzer: a.into(),
            search_analyzer: sa.map(Into::into),
            postings_codec: DocCodec::default(),
            of: None,
            ignore_above: None,
        };
        let e = s.add_field(def("standard", Some("standard"))).unwrap_err();
        assert!(e.to_string().contains("cannot change [analyzer] from [english] to [standard]"), "{e}");
        assert_eq!(s.add_field(def("english", None)).unwrap(), sf);
        assert_eq!(s.search_analyzer(sf).config(), AnalyzerConfig::english());
        assert_eq!(s.add_field(def("english", Some("stop"))).unwrap(), sf);
        assert_eq!(s.search_analyzer(sf).config(), AnalyzerConfig { stop_words: true, stemming: false });
        assert_eq!(s.to_mappings()["properties"]["s"]["search_analyzer"], "stop");
        // Names of one analyzer are one analyzer.
        let mut d =
            Schema::from_mappings(&serde_json::json!({"properties": {"x": {"type": "text"}}})).unwrap();
        d.apply_mappings(&serde_json::json!({"properties": {"x": {"type": "text", "analyzer": "default"}}}))
            .unwrap();
        // An index whose default analyzer is english: a field mapped standard says so in its mapping (and
        // one mapped by default, english), which then maps back to the same schema.
        let mut e = Schema { default_analyzer: Some("english".into()), ..Schema::default() };
        e.apply_mappings(&serde_json::json!({"properties": {"p": {"type": "text", "analyzer": "standard"},
            "q": {"type": "text"}}}))
            .unwrap();
        let out = e.to_mappings();
        assert_eq!(
            (&out["properties"]["p"]["analyzer"], &out["properties"]["q"]["analyzer"]),
            (&serde_json::json!("standard"), &serde_json::json!("english"))
        );
        e.apply_mappings(&out).unwrap();
        // ignore_above: keyword fields only, a whole number, shown by the mapping, updatable.
        let k = Schema::from_mappings(
            &serde_json::json!({"properties": {"k": {"type": "keyword", "ignore_above": 3}}}),
        )
        .unwrap();
        assert_eq!(k.to_mappings()["properties"]["k"]["ignore_above"], 3);
        let err = |m: serde_json::Value| Schema::from_mappings(&m).unwrap_err().to_string();
        assert!(err(serde_json::json!({"properties": {"k": {"type": "text", "ignore_above": 3}}}))
            .contains("keyword"));
        assert!(err(serde_json::json!({"properties": {"k": {"type": "keyword", "ignore_above": -1}}}))
            .contains("whole"));
        assert!(err(serde_json::json!({"properties": {"o": {"properties": {}, "fields": {}}}}))
            .contains("multi-fields"));
    }

    /// Multi-fields (mapping `fields`) are fields of their own, named `parent.sub`, indexing the parent's
    /// values; the mappings nest them back under their parent, and both round trips keep them.
    #[test]
    fn multi_fields_map_and_round_trip() {
        let m = serde_json::json!({"properties": {
            "title": {"type": "text", "fields": {
                "raw": {"type": "keyword"}, "en": {"type": "text", "analyzer": "english"}}},
            "meta": {"properties": {"n": {"type": "long", "fields": {"s": {"type": "keyword"}}}}}}});
        let s = Schema::from_mappings(&m).unwrap();
        let id = |n: &str| s.field_id(n).unwrap();
        // In name order (as the mapping object lists them).
        assert_eq!(s.multi_fields(id("title")), [id("title.en"), id("title.raw")]);
        assert_eq!(s.multi_fields(id("meta.n")), [id("meta.n.s")]);
        assert_eq!((s.source_path(id("title.en")), s.source_path(id("title"))), ("title", "title"));
        assert_eq!(s.field(id("title.raw")).ty, FieldType::Keyword);
        assert_eq!(s.analyzer(id("title.en")).config(), AnalyzerConfig::english());
        let out = s.to_mappings();
        assert_eq!(out["properties"]["title"], m["properties"]["title"]);
        assert_eq!(out["properties"]["meta.n"]["fields"]["s"], serde_json::json!({"type": "keyword"}));
        assert!(out["properties"].get("title.raw").is_none(), "{out}");
        let again = Schema::from_mappings(&out).unwrap();
        assert_eq!(again.fields(), s.fields());
        let json = serde_json::to_string(&s).unwrap();
        let back: Schema = serde_json::from_str::<Schema>(&json).unwrap().rebuild().unwrap();
        assert_eq!(back.multi_fields(id("title")), s.multi_fields(id("title")));
        let err = |m: serde_json::Value| Schema::from_mappings(&m).unwrap_err().to_string();
        let deep = serde_json::json!({"properties": {"t": {"type": "text", "fields": {
            "a": {"type": "text", "fields": {"b": {"type": "keyword"}}}}}}});
        assert!(err(deep).contains("cannot have [fields]"));
        assert!(
            err(serde_json::json!({"properties": {"t": {"type": "text", "fields": 3}}})).contains("[fields]")
        );
        // A field stays what it was mapped as: a multi-field or not.
        let mut s = s;
        let e = s.apply_mappings(&serde_json::json!({"properties": {"title.raw": {"type": "keyword"}}}));
        assert!(e.unwrap_err().to_string().contains("multi-field"));
    }
}
