//! Input formats shared by the CLI and the benchmarks: JSON lines and luceneutil line files.

use crate::error::{Error, Result};

/// The header line of a luceneutil line file.
pub const LINES_HEADER_PREFIX: &str = "FIELDS_HEADER_INDICATOR###";

/// Input file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line (NDJSON / JSONL).
    Jsonl,
    /// luceneutil line file: `title<TAB>date<TAB>body` per line after a header line.
    Lines,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "jsonl" | "ndjson" | "json" => Ok(Format::Jsonl),
            "lines" | "luceneutil" => Ok(Format::Lines),
            o => Err(format!("unknown format [{o}]; use jsonl or lines")),
        }
    }
}

impl Format {
    /// Guesses the format from a file name (`.lines`, `.lines.gz` → lines; anything else → jsonl).
    pub fn guess(path: &str) -> Format {
        if path.trim_end_matches(".gz").ends_with(".lines") || path.trim_end_matches(".gz").ends_with(".txt")
        {
            Format::Lines
        } else {
            Format::Jsonl
        }
    }
}

/// Parses one luceneutil line (`title\tdate\tbody`) into a document. The header line yields `None`.
pub fn parse_lines_doc(line: &str) -> Result<Option<serde_json::Value>> {
    if line.starts_with(LINES_HEADER_PREFIX) {
        return Ok(None);
    }
    let mut parts = line.splitn(3, '\t');
    let (Some(title), Some(date), Some(body)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(Error::BadDocument(
            "line file record needs three tab-separated fields: title, date, body".into(),
        ));
    };
    Ok(Some(serde_json::json!({"title": title, "date": date, "body": body})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        assert!(parse_lines_doc("FIELDS_HEADER_INDICATOR###\tdoctitle\tdocdate\tbody").unwrap().is_none());
        let d = parse_lines_doc("T\t2015-05-23\tsome body\twith tab").unwrap().unwrap();
        assert_eq!(d["body"], "some body\twith tab");
        assert!(parse_lines_doc("no tabs").is_err());
        assert_eq!(Format::guess("x.lines.gz"), Format::Lines);
        assert_eq!(Format::guess("x.jsonl"), Format::Jsonl);
    }
}
