//! Wildcard patterns, as Lucene's `WildcardQuery` reads them: `*` stands for any run of characters (none
//! too), `?` for exactly one character, and `\` makes the character after it literal. The planner expands a
//! pattern against the term dictionaries: the literal characters before its first wildcard narrow the terms to
//! a key range ([`Pattern::literal_prefix`]), and each term there is matched whole ([`Pattern::matches`]); the
//! highlighter marks the tokens that match it.

/// One element of a parsed pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    Literal(char),
    /// `?`: any one character.
    One,
    /// `*`: any run of characters.
    Any,
}

/// A parsed wildcard pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pieces: Vec<Piece>,
}

impl Pattern {
    /// Parses `text`; an error for a `\` at its end (it escapes nothing).
    pub fn parse(text: &str) -> Result<Pattern, String> {
        let mut pieces = vec![];
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            pieces.push(match c {
                '*' => Piece::Any,
                '?' => Piece::One,
                '\\' => Piece::Literal(
                    chars
                        .next()
                        .ok_or_else(|| format!("wildcard pattern [{text}] ends with an escape ('\\')"))?,
                ),
                c => Piece::Literal(c),
            });
        }
        // Runs of `*` match what one does: one is kept (fewer backtracking points).
        pieces.dedup_by(|b, a| *a == Piece::Any && *b == Piece::Any);
        Ok(Pattern { pieces })
    }

    /// The literal characters before the first wildcard: every matching term starts with them.
    pub fn literal_prefix(&self) -> String {
        self.pieces
            .iter()
            .map_while(|p| match p {
                Piece::Literal(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    /// How many wildcards (`*`, `?`) the pattern has, a run of `*` counting once.
    pub fn wildcards(&self) -> usize {
        self.pieces.iter().filter(|p| !matches!(p, Piece::Literal(_))).count()
    }

    /// Whether the pattern's only wildcard is a `*` at its end (a prefix query's).
    pub fn is_prefix(&self) -> bool {
        self.wildcards() == 1 && self.pieces.last() == Some(&Piece::Any)
    }

    /// Whether the pattern is `*` alone (it matches every term).
    pub fn matches_everything(&self) -> bool {
        self.pieces == [Piece::Any]
    }

    /// Whether `text` matches the whole pattern. Greedy with backtracking to the last `*` only: a later
    /// `*` can take over whatever an earlier one would have to, so the match is found in O(pattern × text)
    /// steps at worst.
    pub fn matches(&self, text: &str) -> bool {
        let p = &self.pieces;
        let t: Vec<char> = text.chars().collect();
        let (mut i, mut j) = (0, 0);
        // The last `*` seen and where in the text its run now ends.
        let mut star: Option<(usize, usize)> = None;
        while i < t.len() {
            match p.get(j) {
                Some(Piece::Literal(c)) if *c == t[i] => (i, j) = (i + 1, j + 1),
                Some(Piece::One) => (i, j) = (i + 1, j + 1),
                Some(Piece::Any) => {
                    star = Some((j, i));
                    j += 1;
                }
                _ => match star {
                    // The last `*` takes one more character, and the rest is tried again after it.
                    Some((s, end)) => {
                        star = Some((s, end + 1));
                        (i, j) = (end + 1, s + 1);
                    }
                    None => return false,
                },
            }
        }
        p[j..].iter().all(|&x| x == Piece::Any)
    }
}

#[cfg(test)]
mod tests {
    use super::Pattern;
    use proptest::prelude::*;

    /// Matching by the definition: every way of splitting the text among the pieces (exponential; short
    /// inputs only).
    fn brute(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|k| brute(rest, &t[k..])),
            Some(('?', rest)) => !t.is_empty() && brute(rest, &t[1..]),
            Some((c, rest)) => t.first() == Some(c) && brute(rest, &t[1..]),
        }
    }

    #[test]
    fn examples() {
        let m = |p: &str, t: &str| Pattern::parse(p).unwrap().matches(t);
        assert!(m("te?t", "test") && m("te?t", "text") && !m("te?t", "tet") && !m("te?t", "tests"));
        assert!(m("*", "") && m("*", "anything") && m("a*", "a") && m("a*b", "ab") && m("a*b", "axxb"));
        assert!(!m("a*b", "axxbc") && m("a*b*c", "abxbc") && m("*ing", "running") && !m("*ing", "ingot"));
        assert!(m("caf?", "café") && m("?", "é") && !m("?", "") && !m("??", "é"));
        // Escapes make `*`, `?` and `\` literal.
        assert!(m(r"a\*", "a*") && !m(r"a\*", "ab") && m(r"\?", "?") && !m(r"\?", "x") && m(r"a\\b", r"a\b"));
        assert_eq!(Pattern::parse("ab*c?").unwrap().literal_prefix(), "ab");
        assert_eq!(Pattern::parse(r"a\*b*").unwrap().literal_prefix(), "a*b");
        assert_eq!(Pattern::parse("?ab").unwrap().literal_prefix(), "");
        assert!(Pattern::parse("**").unwrap().matches_everything());
        assert!(!Pattern::parse("*a").unwrap().matches_everything());
        assert!(Pattern::parse(r"ab\").is_err());
    }

    proptest! {
        #[test]
        fn matching_agrees_with_the_definition(
            p in proptest::collection::vec(prop_oneof![Just('a'), Just('b'), Just('*'), Just('?')], 0..8),
            t in proptest::collection::vec(prop_oneof![Just('a'), Just('b')], 0..10),
        ) {
            let pattern: String = p.iter().collect();
            let text: String = t.iter().collect();
            prop_assert_eq!(Pattern::parse(&pattern).unwrap().matches(&text), brute(&p, &t), "{} on {}", pattern, text);
        }
    }
}
