//! Regular expressions over terms, as Lucene's `RegExp` reads them (Elasticsearch's `regexp` query,
//! `/joh?n(ath[oa]n)/` in a query string). A pattern always matches a *whole* term: there are no anchors
//! (`^` and `$` are ordinary characters), `.` is any character, and `"…"` is a literal string.
//!
//! Lucene's syntax is translated into the `regex` crate's ([`translate`]) and compiled once per query: a
//! hand-written matcher would be a second regex engine to trust, and the crate's lazy DFA matches a term in
//! time linear in its length whatever the pattern. The planner expands a pattern against the term
//! dictionaries as it does a wildcard: the literal prefix every match starts with ([`Regexp::literal_prefix`],
//! from the crate's own literal extraction) narrows the terms to a key range, and each term there is matched
//! whole.
//!
//! Lucene's optional operators follow Elasticsearch's `flags` (all on by default): `@` (any string) and `#`
//! (the empty language: matches nothing) are supported; complement (`~`), intersection (`&`) and numeric
//! intervals (`<1-20>`) have no equivalent in the crate and are refused by name — unless their flag is off,
//! when the character is an ordinary one, as in Lucene.

use regex_syntax::hir::literal::{ExtractKind, Extractor};

/// The longest pattern accepted, in bytes (Elasticsearch's `index.max_regex_length` default).
pub const MAX_REGEX_LENGTH: usize = 1000;

/// The most memory a compiled pattern may take (the crate's `size_limit`): a pattern past it — counted
/// repetitions nested deep enough — is refused as too complex rather than compiled.
const COMPILED_SIZE_LIMIT: usize = 1 << 20;

/// Which of Lucene's optional operators a pattern may use (Elasticsearch's `flags`: `ALL` by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegexpFlags(u8);

impl RegexpFlags {
    /// `~`: complement.
    pub const COMPLEMENT: RegexpFlags = RegexpFlags(1);
    /// `#`: the empty language.
    pub const EMPTY: RegexpFlags = RegexpFlags(2);
    /// `&`: intersection.
    pub const INTERSECTION: RegexpFlags = RegexpFlags(4);
    /// `<n-m>`: a numeric interval.
    pub const INTERVAL: RegexpFlags = RegexpFlags(8);
    /// `@`: any string.
    pub const ANYSTRING: RegexpFlags = RegexpFlags(16);
    /// Every optional operator.
    pub const ALL: RegexpFlags = RegexpFlags(31);
    /// None: `~ # & < @` are ordinary characters.
    pub const NONE: RegexpFlags = RegexpFlags(0);

    fn has(self, f: RegexpFlags) -> bool {
        self.0 & f.0 != 0
    }

    /// Elasticsearch's `flags` string: names joined by `|` (`"INTERSECTION|COMPLEMENT|EMPTY"`), any case;
    /// an empty string is `ALL`, as in Elasticsearch.
    pub fn parse(text: &str) -> Result<RegexpFlags, String> {
        if text.trim().is_empty() {
            return Ok(RegexpFlags::ALL);
        }
        let mut f = 0;
        for name in text.split('|') {
            f |= match name.trim().to_ascii_uppercase().as_str() {
                "ALL" => RegexpFlags::ALL.0,
                "NONE" => 0,
                "COMPLEMENT" => RegexpFlags::COMPLEMENT.0,
                "EMPTY" => RegexpFlags::EMPTY.0,
                "INTERSECTION" => RegexpFlags::INTERSECTION.0,
                "INTERVAL" => RegexpFlags::INTERVAL.0,
                "ANYSTRING" => RegexpFlags::ANYSTRING.0,
                other => {
                    return Err(format!(
                        "unknown regexp flag [{other}]: expected ALL, NONE, COMPLEMENT, EMPTY, INTERSECTION, \
                         INTERVAL or ANYSTRING"
                    ))
                }
            };
        }
        Ok(RegexpFlags(f))
    }
}

impl Default for RegexpFlags {
    fn default() -> Self {
        RegexpFlags::ALL
    }
}

/// A compiled term pattern.
#[derive(Debug, Clone)]
pub struct Regexp {
    re: regex::Regex,
    prefix: String,
    everything: bool,
}

impl Regexp {
    /// Parses a Lucene `pattern` under `flags`, case-insensitively if asked; the error says what is wrong
    /// with the pattern (Lucene's syntax, the refused operators, or the limits).
    pub fn new(pattern: &str, flags: RegexpFlags, case_insensitive: bool) -> Result<Regexp, String> {
        if pattern.len() > MAX_REGEX_LENGTH {
            return Err(format!(
                "the regular expression is {} bytes long, more than the {MAX_REGEX_LENGTH} allowed",
                pattern.len()
            ));
        }
        let inner = translate(pattern, flags)?;
        let full = format!("(?s{}:^(?:{inner})$)", if case_insensitive { "i" } else { "" });
        let re = regex::RegexBuilder::new(&full).size_limit(COMPILED_SIZE_LIMIT).build().map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => {
                format!("regular expression [{pattern}] is too complex (it compiles past {COMPILED_SIZE_LIMIT} bytes)")
            }
            e => format!("invalid regular expression [{pattern}]: {e}"),
        })?;
        let prefix = literal_prefix(&full);
        let everything = matches!(inner.as_str(), ".*" | "(?:.*)" | ".+" | "(?:.+)");
        Ok(Regexp { re, prefix, everything })
    }

    /// Whether `term` matches the whole pattern.
    pub fn matches(&self, term: &str) -> bool {
        self.re.is_match(term)
    }

    /// A prefix every matching term starts with (empty when the pattern does not pin one down).
    pub fn literal_prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether the pattern matches every (non-empty) term: `.*`, `.+`, `@`.
    pub fn matches_every_term(&self) -> bool {
        self.everything
    }
}

/// The longest prefix common to the literals every match of `full` starts with (the crate's prefix
/// extraction; none when they are infinitely many), cut back to a character boundary.
fn literal_prefix(full: &str) -> String {
    let Ok(hir) = regex_syntax::Parser::new().parse(full) else { return String::new() };
    let seq = Extractor::new().kind(ExtractKind::Prefix).extract(&hir);
    let Some(lcp) = seq.longest_common_prefix() else { return String::new() };
    match std::str::from_utf8(lcp) {
        Ok(s) => s.to_string(),
        Err(e) => String::from_utf8_lossy(&lcp[..e.valid_up_to()]).into_owned(),
    }
}

/// The ASCII classes of Lucene's `\d \s \w` (and their negations) in the crate's syntax.
fn shorthand(c: char) -> Option<&'static str> {
    Some(match c {
        'd' => "[0-9]",
        'D' => "[^0-9]",
        's' => r"[ \t\n\r]",
        'S' => r"[^ \t\n\r]",
        'w' => "[a-zA-Z0-9_]",
        'W' => "[^a-zA-Z0-9_]",
        _ => return None,
    })
}

/// The same inside a character class (without the brackets).
fn shorthand_in_class(c: char) -> Option<&'static str> {
    Some(match c {
        'd' => "0-9",
        's' => r" \t\n\r",
        'w' => "a-zA-Z0-9_",
        _ => return None,
    })
}

/// Rewrites Lucene's `RegExp` syntax into the `regex` crate's, which shares its operators (`. ? * + {n,m} | ( )
/// [...]`) but gives meanings to characters Lucene takes literally (`^ $` anchors, `\b` and other
/// escapes, `[[:alpha:]]` and `&&` in classes): every character is copied as a literal except Lucene's
/// operators.
pub fn translate(pattern: &str, flags: RegexpFlags) -> Result<String, String> {
    let err = |what: String| Err(format!("invalid regular expression [{pattern}]: {what}"));
    let refuse = |op: &str, flag: &str| {
        Err(format!(
            "regular expression [{pattern}]: the {op} is not supported; escape it with '\\' or leave {flag} out of \
             [flags]"
        ))
    };
    let mut out = String::with_capacity(pattern.len() * 2);
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(e) = chars.next() else { return err("it ends with an escape ('\\')".into()) };
                match shorthand(e) {
                    Some(class) => out.push_str(class),
                    None => out.push_str(&regex::escape(e.encode_utf8(&mut [0; 4]))),
                }
            }
            '"' => {
                let mut lit = String::new();
                loop {
                    match chars.next() {
                        None => return err("a '\"' is not closed".into()),
                        Some('"') => break,
                        Some(x) => lit.push(x),
                    }
                }
                out.push_str("(?:");
                out.push_str(&regex::escape(&lit));
                out.push(')');
            }
            '.' | '(' | ')' | '|' | '*' | '+' | '?' => out.push(c),
            '{' => {
                // {n}, {n,} or {n,m}: digits and at most one comma.
                let mut body = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(x @ ('0'..='9' | ',')) => body.push(x),
                        _ => return err("a repetition must read {n}, {n,} or {n,m}".into()),
                    }
                }
                let mut parts = body.split(',');
                if parts.next().is_none_or(str::is_empty) || parts.nth(1).is_some() {
                    return err("a repetition must read {n}, {n,} or {n,m}".into());
                }
                out.push('{');
                out.push_str(&body);
                out.push('}');
            }
            '[' => class(&mut chars, &mut out)
                .map_err(|e| format!("invalid regular expression [{pattern}]: {e}"))?,
            '~' if flags.has(RegexpFlags::COMPLEMENT) => {
                return refuse("complement operator '~'", "COMPLEMENT")
            }
            '&' if flags.has(RegexpFlags::INTERSECTION) => {
                return refuse("intersection operator '&'", "INTERSECTION")
            }
            '<' if flags.has(RegexpFlags::INTERVAL) => return refuse("numeric interval '<n-m>'", "INTERVAL"),
            '@' if flags.has(RegexpFlags::ANYSTRING) => out.push_str("(?:.*)"),
            // The empty language: a class with no character in it.
            '#' if flags.has(RegexpFlags::EMPTY) => out.push_str("[a&&b]"),
            c => out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4]))),
        }
    }
    Ok(out)
}

/// A character class after its `[`, up to the matching `]`: `^` first negates, `a-z` is a range, `\`
/// escapes (and `\d \s \w` are their sets); every other character is literal.
fn class(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, out: &mut String) -> Result<(), String> {
    out.push('[');
    if chars.peek() == Some(&'^') {
        chars.next();
        out.push('^');
    }
    let start = out.len();
    loop {
        let c = match chars.next() {
            None => return Err("a '[' is not closed".into()),
            Some(']') if out.len() == start => return Err("a character class is empty ('[]')".into()),
            Some(']') => break,
            Some(c) => c,
        };
        match c {
            '\\' => {
                let e = chars.next().ok_or("it ends with an escape ('\\')")?;
                match shorthand_in_class(e) {
                    Some(set) => out.push_str(set),
                    None => out.push_str(&regex::escape(e.encode_utf8(&mut [0; 4]))),
                }
            }
            // A range between two characters; a '-' first or last is literal.
            '-' if out.len() > start && chars.peek() != Some(&']') => out.push('-'),
            c => out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4]))),
        }
    }
    out.push(']');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(p: &str, t: &str) -> bool {
        Regexp::new(p, RegexpFlags::ALL, false).unwrap().matches(t)
    }

    #[test]
    fn patterns_match_whole_terms_as_lucene_reads_them() {
        assert!(m("joh?n(ath[oa]n)", "jonathan"));
        assert!(m("joh?n(ath[oa]n)", "johnathon"));
        assert!(!m("joh?n(ath[oa]n)", "jonathanx"), "a pattern matches the whole term");
        assert!(!m("ath", "jonathan"));
        assert!(m("a.c", "abc") && m("a.c", "a\nc"), "'.' is any character");
        assert!(m("ab{2}c", "abbc") && !m("ab{2}c", "abc") && m("ab{1,}", "abbb") && m("ab{0,1}", "a"));
        assert!(m("(ab|cd)+", "abcdab") && !m("(ab|cd)+", ""));
        assert!(m("[^a-c]x", "dx") && !m("[^a-c]x", "bx"));
        assert!(m("[a-]", "-") && m("[-a]", "-") && m("[a\\]]", "]"));
        // Characters the regex crate gives meanings to are literal here.
        assert!(m("^a$", "^a$") && !m("^a$", "a"));
        assert!(m("[[:alpha:]]", ":]"), "'[[:' is a class of '[' and ':', then ']' literal");
        assert!(m("a\\.b", "a.b") && !m("a\\.b", "axb"));
        assert!(m("\\d+", "2015") && !m("\\d", "x") && m("\\w\\s\\w", "a b"));
        assert!(m("[\\d]x", "7x"));
        assert!(m("\"a.b\"+", "a.ba.b") && !m("\"a.b\"", "axb"), "a quoted string is literal and one unit");
        // Optional operators under flags.
        assert!(m("ab@", "abzzz") && m("@", ""));
        assert!(!m("a#", "a") && !m("#", ""), "'#' is the empty language");
        let none = |p: &str, t: &str| Regexp::new(p, RegexpFlags::NONE, false).unwrap().matches(t);
        assert!(none("a@b", "a@b") && none("a#", "a#") && none("a~b&c<d>", "a~b&c<d>"));
        assert!(m("a\\~b\\&c\\<", "a~b&c<"));
        // Case.
        assert!(!m("Abc", "abc"));
        assert!(Regexp::new("Ab[C-D]", RegexpFlags::ALL, true).unwrap().matches("aBd"));
    }

    #[test]
    fn unsupported_and_malformed_patterns_are_refused_by_name() {
        let e = |p: &str| Regexp::new(p, RegexpFlags::ALL, false).unwrap_err();
        assert!(e("a~b").contains("complement"), "{}", e("a~b"));
        assert!(e("a&b").contains("intersection"));
        assert!(e("<1-20>").contains("interval"));
        for bad in ["a\\", "[ab", "[]", "\"ab", "a{x}", "a{,2}", "(ab", "*a", "a{1,2,3}"] {
            assert!(e(bad).contains("regular expression"), "{bad}: {}", e(bad));
        }
        assert!(e(&"a".repeat(MAX_REGEX_LENGTH + 1)).contains("allowed"));
        assert!(e("(((a{100}){100}){100})").contains("too complex"), "{}", e("(((a{100}){100}){100})"));
        let only = RegexpFlags::parse("intersection|Complement").unwrap();
        assert!(Regexp::new("a@b#", only, false).unwrap().matches("a@b#"));
        assert!(Regexp::new("a&b", only, false).is_err());
        assert_eq!(RegexpFlags::parse("").unwrap(), RegexpFlags::ALL);
        assert!(RegexpFlags::parse("ALL|BOGUS").unwrap_err().contains("BOGUS"));
    }

    #[test]
    fn literal_prefixes_and_match_everything() {
        let p =
            |x: &str, ci: bool| Regexp::new(x, RegexpFlags::ALL, ci).unwrap().literal_prefix().to_string();
        assert_eq!(p("abc.*", false), "abc");
        assert_eq!(p("ab?c", false), "a");
        assert_eq!(p("(abc|abd)x", false), "ab");
        assert_eq!(p("a|b", false), "");
        assert_eq!(p(".*x", false), "");
        assert_eq!(p("ab.*", true), "", "case variants share no prefix");
        assert_eq!(p("日本.", false), "日本");
        for every in [".*", "@", ".+"] {
            assert!(Regexp::new(every, RegexpFlags::ALL, false).unwrap().matches_every_term());
        }
        assert!(!Regexp::new("a.*", RegexpFlags::ALL, false).unwrap().matches_every_term());
    }

    proptest! {
        /// Every term a pattern matches starts with its literal prefix (the planner's key range never
        /// loses a match).
        #[test]
        fn matches_start_with_the_literal_prefix(
            pattern in "([abé.]|\\(|\\)|\\||\\*|\\?|\\[ab\\]|\"ab\"|\\{1,2\\}){0,8}",
            terms in proptest::collection::vec("[abé]{0,6}", 1..40),
            ci in any::<bool>(),
        ) {
            let Ok(re) = Regexp::new(&pattern, RegexpFlags::ALL, ci) else { return Ok(()) };
            for t in &terms {
                if re.matches(t) {
                    prop_assert!(t.starts_with(re.literal_prefix()), "{pattern} {t} {}", re.literal_prefix());
                }
            }
        }
    }
}
