//! The Lucene-style query-string parser: turns `title:"quick fox" +lang:en -draft pri*` into a [`Query`].
//!
//! It follows Lucene's classic query parser with the default operator OR, plus Elasticsearch's
//! `field:>5` comparisons. The work is split in two: a small hand-written lexer turns the input into
//! tokens (words, phrases, whole ranges, punctuation and operators), and a recursive-descent parser builds
//! the AST from them. Every error carries the byte offset of the offending construct in the input.
//!
//! # Grammar
//!
//! ```text
//! query    = clause { [ conj ] clause } ;
//! clause   = [ modifier ] ( "*:*" | [ FIELD ":" ] value ) [ "^" BOOST ] ;
//! value    = WORD | PHRASE | REGEXP | range | "(" query ")" ;
//! range    = ( "[" | "{" ) bound "TO" bound ( "]" | "}" )
//!          | ( ">" | ">=" | "<" | "<=" ) bound ;
//! modifier = "+" | "-" | "NOT" | "!" ;
//! conj     = "AND" | "&&" | "OR" | "||" ;
//! FIELD    = [A-Za-z0-9_.@-]+ ;
//! BOOST    = [0-9.]+ ;   (a finite number of at least 0)
//! ```
//!
//! Whitespace separates tokens and is otherwise ignored (`title: foo` works).
//!
//! - A WORD is a run of characters other than whitespace and `( ) " : [ ] { } ^ ~`; a backslash escapes
//!   any character (`\:`, `\(`, `\ `, `\\`). A word exactly `AND`, `OR`, `NOT`, `&&` or `||` (unescaped,
//!   case-sensitive) is an operator; `and` is an ordinary word. At the *start* of a token, `+ - !` are
//!   modifiers and `> <` begin a comparison; inside a word they are ordinary characters (`wi-fi`).
//! - A word ending in one unescaped `*` is a prefix query (`pre*`). A lone `*` matches all documents, or,
//!   under a field (`title:*`), is the prefix query with an empty prefix ("has any term in `title`").
//!   `*:*` matches all documents. A word with any other unescaped `*` or `?` is a wildcard query
//!   ([`Query::Wildcard`]: `te?t`, `*ing`, `f*o*`): `*` any run of characters, `?` exactly one; it is
//!   lowercased, not stemmed, as a prefix is.
//! - A PHRASE is `"..."`; inside it `\"` is a quote and `\\` a backslash (any escaped character stands
//!   for itself).
//! - A REGEXP is `/.../` (`name:/joh?n(ath[oa]n)/`): a regular expression in Lucene's syntax that
//!   matches whole terms ([`Query::Regexp`], every optional operator allowed, not analyzed), up to the next
//!   unescaped `/`; `\/` inside is a `/`, other escapes are the pattern's. A `/` starts one only at the start
//!   of a token (`and/or` is a word).
//! - A range bound is `*` (unbounded), a quoted string, or a run of characters other than whitespace and
//!   `] }` (`\` escapes). In `>=x`-style comparisons the value must follow the operator directly and ends
//!   where a word would. Ranges need a field, written on the range or inherited from a group:
//!   `price:(>=10 AND <20)`.
//! - `field:(a b)` applies the field to every clause inside that has none of its own.
//! - `^N` after a clause's value multiplies its score by `N` ([`Query::Boost`]): `title:dune^2`,
//!   `"desert planet"^1.5`, `(a OR b)^0.5`, `*:*^3`. `N` follows the `^` directly; a boost that is not a
//!   number, or is negative, is an error. A boost of 1 adds nothing.
//! - `~N` right after a phrase's closing quote is its slop (`"desert planet"~3`, Lucene's proximity search;
//!   [`Query::Phrase`]): a whole number, directly after the `~`. `~` right after a word makes it fuzzy
//!   ([`Query::Fuzzy`]): `roam~` (`AUTO` edits, by the word's length), `roam~1` (0 to 2 edits); the word is
//!   lowercased, not stemmed, as Lucene normalizes multi-term queries.
//!
//! # Semantics
//!
//! As in Lucene's classic parser: a clause is SHOULD unless it has a modifier (`+` = MUST, `-`/`NOT`/`!` =
//! MUST_NOT); `AND` makes the clauses on both sides MUST unless they are MUST_NOT; `OR` changes nothing.
//! So `a OR b AND c` is `a` SHOULD, `b` and `c` MUST. A query or group that consists of a single SHOULD
//! clause is that clause itself; anything else becomes [`Query::Bool`] with `must`, `should` and
//! `must_not` (never `filter`). A query with only MUST_NOT clauses is allowed.
//!
//! # Limits
//!
//! At most [`MAX_QUERY_CLAUSES`] leaf clauses and [`MAX_DEPTH`] levels of nested parentheses; the parser
//! runs in time linear in the input and never recurses deeper than the nesting limit.

use std::fmt;
use std::ops::Bound;

use super::ast::{Query, MAX_SLOP};

/// The most leaf clauses (terms, phrases, prefixes, ranges, match-alls) one query may contain.
pub const MAX_QUERY_CLAUSES: usize = 1024;

/// The deepest parenthesis nesting allowed.
pub const MAX_DEPTH: usize = 32;

/// A query-string syntax error: where it is (a byte offset into the input) and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    /// Byte offset in the input of the construct at fault (the input's length for "at the end").
    pub offset: usize,
    /// A human-readable description of the problem.
    pub message: String,
}

impl ParseError {
    fn new(offset: usize, message: impl Into<String>) -> Self {
        ParseError { offset, message: message.into() }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "query syntax error at offset {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Parses a Lucene-style query string (see the [module docs](self) for the syntax).
pub fn parse(input: &str) -> Result<Query, ParseError> {
    parse_with(input, &ParseOptions::default())
}

/// How [`parse_with`] reads what the query string leaves open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParseOptions {
    /// The slop of a phrase written without `~N` (Lucene's and Elasticsearch's `phrase_slop`; 0 by default).
    pub phrase_slop: u32,
}

/// [`parse`] with options.
pub fn parse_with(input: &str, opts: &ParseOptions) -> Result<Query, ParseError> {
    if opts.phrase_slop > MAX_SLOP {
        return Err(ParseError::new(0, format!("phrase slop must be at most {MAX_SLOP}")));
    }
    let tokens = Lexer { input, pos: 0, phrase_slop: opts.phrase_slop }.tokenize()?;
    if tokens.is_empty() {
        return Err(ParseError::new(0, "empty query"));
    }
    Parser { input, tokens, pos: 0, leaves: 0 }.parse_top()
}

// ------------------------------------------------------------------------------------------------
// Lexer
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum TokenKind {
    Word(Word),
    /// A quoted phrase, escapes resolved, and its slop (`"a b"~2`; 0 without `~`).
    Phrase(String, u32),
    /// `/…/`: a regular expression, `\/` resolved to `/` (its other escapes are the pattern's own).
    Regexp(String),
    /// `^N`: the boost of the clause before.
    Boost(f32),
    /// A complete range, `[a TO b}` or `>=a`.
    Range {
        lower: Bound<String>,
        upper: Bound<String>,
    },
    Colon,
    LParen,
    RParen,
    /// `+`
    Plus,
    /// `-`
    Minus,
    /// `NOT` or `!`
    Not,
    /// `AND` or `&&`
    And,
    /// `OR` or `||`
    Or,
}

/// A bare word with its escapes resolved.
#[derive(Debug, Clone, PartialEq)]
struct Word {
    text: String,
    /// Whether any character was escaped (an escaped word is never an operator or `*`).
    escaped: bool,
    /// The unescaped `*`s and `?`s (wildcards): (byte offset in the input, byte index in `text`).
    stars: Vec<(usize, usize)>,
    /// `~` right after it (a fuzzy term): its edits, `None` for `AUTO` (a bare `~`); with the `~`'s offset.
    fuzzy: Option<(usize, Option<u8>)>,
}

#[derive(Debug, Clone, PartialEq)]
struct Token {
    kind: TokenKind,
    /// Byte range of the token in the input.
    offset: usize,
    end: usize,
}

/// Characters that end a word (besides whitespace); `\` escapes them.
fn ends_word(c: char) -> bool {
    c.is_whitespace() || matches!(c, '(' | ')' | '"' | ':' | '[' | ']' | '{' | '}' | '^' | '~')
}

/// One bound of a range before interpretation.
struct RangeItem {
    text: String,
    /// Quoted or escaped: never `*` (unbounded) or the keyword `TO`.
    literal: bool,
    offset: usize,
}

impl RangeItem {
    fn is_to(&self) -> bool {
        !self.literal && self.text == "TO"
    }

    fn into_bound(self, inclusive: bool) -> Bound<String> {
        if !self.literal && self.text == "*" {
            Bound::Unbounded
        } else if inclusive {
            Bound::Included(self.text)
        } else {
            Bound::Excluded(self.text)
        }
    }
}

struct Lexer<'a> {
    input: &'a str,
    pos: usize,
    /// The slop of a phrase without `~N`.
    phrase_slop: u32,
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> Option<char> {
        self.input[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    fn tokenize(mut self) -> Result<Vec<Token>, ParseError> {
        let mut tokens = Vec::new();
        loop {
            self.skip_whitespace();
            let offset = self.pos;
            let Some(c) = self.peek() else { break };
            let kind = match c {
                '(' | ')' | ':' | '+' | '-' | '!' => {
                    self.bump();
                    match c {
                        '(' => TokenKind::LParen,
                        ')' => TokenKind::RParen,
                        ':' => TokenKind::Colon,
                        '+' => TokenKind::Plus,
                        '-' => TokenKind::Minus,
                        _ => TokenKind::Not,
                    }
                }
                '"' => {
                    let text = self.quoted()?;
                    TokenKind::Phrase(text, self.slop()?)
                }
                '[' | '{' => self.bracket_range()?,
                '/' => self.regexp()?,
                '>' | '<' => self.comparison()?,
                ']' | '}' => {
                    return Err(ParseError::new(offset, format!("unexpected '{c}' outside a range")))
                }
                '^' => self.boost()?,
                '~' => return Err(ParseError::new(
                    offset,
                    "'~' must follow a word directly (fuzzy: 'roam~1') or a phrase's closing quote (slop)",
                )),
                _ => self.word()?,
            };
            tokens.push(Token { kind, offset, end: self.pos });
        }
        Ok(tokens)
    }

    /// `^N`: a finite number of at least 0 right after the `^`.
    fn boost(&mut self) -> Result<TokenKind, ParseError> {
        let at = self.pos;
        self.bump();
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
            self.bump();
        }
        let text = &self.input[start..self.pos];
        match text.parse::<f32>() {
            Ok(b) if b.is_finite() => Ok(TokenKind::Boost(b)),
            _ => Err(ParseError::new(
                at,
                "a boost '^' must be followed by a number of at least 0, as in 'title:dune^2'",
            )),
        }
    }

    /// `~N` right after a phrase's closing quote: its slop, a whole number (Lucene's proximity search,
    /// `"jakarta apache"~10`); the default phrase slop when no `~` follows.
    fn slop(&mut self) -> Result<u32, ParseError> {
        if self.peek() != Some('~') {
            return Ok(self.phrase_slop);
        }
        let at = self.pos;
        self.bump();
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        // A slop ends like a word; anything else glued to it (`~2.5`, `~x`) is refused, not half read.
        let clean_end = self.peek().is_none_or(ends_word);
        match self.input[start..self.pos].parse::<u32>() {
            Ok(n) if clean_end && n <= MAX_SLOP => Ok(n),
            _ => Err(ParseError::new(
                at,
                format!("a phrase's '~' must be followed by a whole number of at most {MAX_SLOP}, as in '\"a b\"~2'"),
            )),
        }
    }

    /// Consumes a backslash and the character it escapes.
    fn escape(&mut self) -> Result<char, ParseError> {
        let at = self.pos;
        self.bump();
        self.bump().ok_or_else(|| ParseError::new(at, "escape character '\\' at the end of the query"))
    }

    fn word(&mut self) -> Result<TokenKind, ParseError> {
        let mut word = Word { text: String::new(), escaped: false, stars: Vec::new(), fuzzy: None };
        while let Some(c) = self.peek() {
            if c == '\\' {
                word.text.push(self.escape()?);
                word.escaped = true;
                continue;
            }
            if ends_word(c) {
                break;
            }
            if c == '*' || c == '?' {
                word.stars.push((self.pos, word.text.len()));
            }
            word.text.push(c);
            self.bump();
        }
        if self.peek() == Some('~') && !word.text.is_empty() {
            word.fuzzy = Some((self.pos, self.fuzziness()?));
        }
        if !word.escaped && word.fuzzy.is_none() {
            match word.text.as_str() {
                "AND" | "&&" => return Ok(TokenKind::And),
                "OR" | "||" => return Ok(TokenKind::Or),
                "NOT" => return Ok(TokenKind::Not),
                _ => {}
            }
        }
        Ok(TokenKind::Word(word))
    }

    /// `~` or `~N` right after a word: a fuzzy term of `N` edits (0 to 2), `AUTO` without `N`
    /// (Elasticsearch's `query_string` default).
    fn fuzziness(&mut self) -> Result<Option<u8>, ParseError> {
        let at = self.pos;
        self.bump();
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
            self.bump();
        }
        let clean_end = self.peek().is_none_or(ends_word) && self.peek() != Some('~');
        match &self.input[start..self.pos] {
            "" if clean_end => Ok(None),
            n @ ("0" | "1" | "2") if clean_end => Ok(n.parse().ok()),
            _ => Err(ParseError::new(
                at,
                "a word's '~' (fuzzy) takes 0, 1 or 2 edits or none (AUTO), as in 'roam~1'",
            )),
        }
    }

    /// `/…/` from the current `/`: a regular expression up to the next unescaped `/`. `\/` is a `/`;
    /// any other escape is kept as written, for the pattern to read.
    fn regexp(&mut self) -> Result<TokenKind, ParseError> {
        let open = self.pos;
        self.bump();
        let mut text = String::new();
        loop {
            match self.bump() {
                Some('/') => return Ok(TokenKind::Regexp(text)),
                Some('\\') => match self.bump() {
                    Some('/') => text.push('/'),
                    Some(c) => {
                        text.push('\\');
                        text.push(c);
                    }
                    None => break,
                },
                Some(c) => text.push(c),
                None => break,
            }
        }
        Err(ParseError::new(open, "unclosed regular expression: a '/' starts one, another must end it"))
    }

    /// A quoted string starting at the current `"`; returns its content with escapes resolved.
    fn quoted(&mut self) -> Result<String, ParseError> {
        let open = self.pos;
        self.bump();
        let mut text = String::new();
        loop {
            match self.peek() {
                None => return Err(ParseError::new(open, "unclosed quote")),
                Some('"') => {
                    self.bump();
                    return Ok(text);
                }
                Some('\\') => match self.escape() {
                    Ok(c) => text.push(c),
                    Err(_) => return Err(ParseError::new(open, "unclosed quote")),
                },
                Some(c) => {
                    text.push(c);
                    self.bump();
                }
            }
        }
    }

    /// An unquoted range bound: characters up to whitespace or one for which `stop` holds.
    fn bare_bound(&mut self, stop: fn(char) -> bool) -> Result<RangeItem, ParseError> {
        let offset = self.pos;
        let mut item = RangeItem { text: String::new(), literal: false, offset };
        while let Some(c) = self.peek() {
            if c == '\\' {
                item.text.push(self.escape()?);
                item.literal = true;
            } else if c.is_whitespace() || stop(c) {
                break;
            } else {
                item.text.push(c);
                self.bump();
            }
        }
        Ok(item)
    }

    /// `[lower TO upper]`, `{lower TO upper}` or a mix, starting at the current `[` or `{`.
    fn bracket_range(&mut self) -> Result<TokenKind, ParseError> {
        let open = self.pos;
        let lower_inclusive = self.bump() == Some('[');
        let mut items = Vec::new();
        let upper_inclusive = loop {
            self.skip_whitespace();
            match self.peek() {
                None => return Err(ParseError::new(open, "unclosed range")),
                Some(c @ (']' | '}')) => {
                    self.bump();
                    break c == ']';
                }
                Some('"') => {
                    let offset = self.pos;
                    let text = self.quoted()?;
                    items.push(RangeItem { text, literal: true, offset });
                }
                Some(_) => items.push(self.bare_bound(|c| matches!(c, ']' | '}'))?),
            }
        };
        let mut items = items.into_iter();
        match (items.next(), items.next(), items.next(), items.next()) {
            (Some(lower), Some(to), Some(upper), None) if to.is_to() => Ok(TokenKind::Range {
                lower: lower.into_bound(lower_inclusive),
                upper: upper.into_bound(upper_inclusive),
            }),
            (_, _, _, Some(extra)) => Err(ParseError::new(
                extra.offset,
                format!("unexpected '{}' in range: expected ']' or '}}'", extra.text),
            )),
            (_, Some(to), _, None) if !to.is_to() => {
                Err(ParseError::new(to.offset, format!("expected 'TO' in range, found '{}'", to.text)))
            }
            _ => Err(ParseError::new(open, "incomplete range: expected '[lower TO upper]'")),
        }
    }

    /// `>x`, `>=x`, `<x` or `<=x`, starting at the current `>` or `<`.
    fn comparison(&mut self) -> Result<TokenKind, ParseError> {
        let start = self.pos;
        let greater = self.bump() == Some('>');
        let inclusive = self.peek() == Some('=');
        if inclusive {
            self.bump();
        }
        let item = match self.peek() {
            Some('"') => {
                let offset = self.pos;
                RangeItem { text: self.quoted()?, literal: true, offset }
            }
            Some(c) if c == '\\' || !ends_word(c) => self.bare_bound(ends_word)?,
            _ => {
                let op = &self.input[start..self.pos];
                return Err(ParseError::new(start, format!("expected a value right after '{op}'")));
            }
        };
        let bound = item.into_bound(inclusive);
        Ok(if greater {
            TokenKind::Range { lower: bound, upper: Bound::Unbounded }
        } else {
            TokenKind::Range { lower: Bound::Unbounded, upper: bound }
        })
    }
}

// ------------------------------------------------------------------------------------------------
// Parser
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Occur {
    Must,
    Should,
    MustNot,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Conj {
    None,
    And,
    Or,
}

struct Parser<'a> {
    input: &'a str,
    tokens: Vec<Token>,
    pos: usize,
    /// Leaf clauses produced so far, against [`MAX_QUERY_CLAUSES`].
    leaves: usize,
}

impl Parser<'_> {
    fn peek_kind(&self) -> Option<&TokenKind> {
        self.tokens.get(self.pos).map(|t| &t.kind)
    }

    /// The token at `index` as written, shortened if long, for messages.
    fn describe(&self, index: usize) -> String {
        let token = &self.tokens[index];
        let text = &self.input[token.offset..token.end];
        match text.char_indices().nth(24) {
            Some((cut, _)) => format!("'{}...'", &text[..cut]),
            None => format!("'{text}'"),
        }
    }

    fn parse_top(&mut self) -> Result<Query, ParseError> {
        let clauses = self.parse_query(None, 0)?;
        if let Some(token) = self.tokens.get(self.pos) {
            // `parse_query` stops only at the end or at a ')'.
            return Err(ParseError::new(token.offset, "unbalanced parenthesis: ')' without a matching '('"));
        }
        if clauses.is_empty() {
            return Err(ParseError::new(0, "empty query"));
        }
        Ok(build(clauses))
    }

    /// `clause { [ conj ] clause }`, up to the end of the input or a `)` (not consumed).
    fn parse_query(&mut self, field: Option<&str>, depth: usize) -> Result<Vec<(Occur, Query)>, ParseError> {
        let mut clauses: Vec<(Occur, Query)> = Vec::new();
        loop {
            let conj = match self.peek_kind() {
                None | Some(TokenKind::RParen) => break,
                Some(TokenKind::And) => Conj::And,
                Some(TokenKind::Or) => Conj::Or,
                Some(_) => Conj::None,
            };
            // The index of the last operator token before the clause, for error messages.
            let mut operator = None;
            if conj != Conj::None {
                if clauses.is_empty() {
                    let op = self.describe(self.pos);
                    return Err(ParseError::new(
                        self.tokens[self.pos].offset,
                        format!("operator {op} must come between two clauses"),
                    ));
                }
                operator = Some(self.pos);
                self.pos += 1;
            }
            let modifier = match self.peek_kind() {
                Some(TokenKind::Plus) => Some(Occur::Must),
                Some(TokenKind::Minus | TokenKind::Not) => Some(Occur::MustNot),
                _ => None,
            };
            if modifier.is_some() {
                operator = Some(self.pos);
                self.pos += 1;
            }
            let query = self.parse_clause(field, depth, operator)?;
            add_clause(&mut clauses, conj, modifier, query);
        }
        Ok(clauses)
    }

    /// `"*:*" | [ FIELD ":" ] value`. `operator` is the operator token just before, if any.
    fn parse_clause(
        &mut self,
        field: Option<&str>,
        depth: usize,
        operator: Option<usize>,
    ) -> Result<Query, ParseError> {
        let Some(token) = self.tokens.get(self.pos) else {
            return Err(match operator {
                Some(op) => ParseError::new(
                    self.tokens[op].offset,
                    format!("dangling operator {}: expected a clause after it", self.describe(op)),
                ),
                None => ParseError::new(self.input.len(), "expected a clause"),
            });
        };
        let followed_by_colon =
            matches!(self.tokens.get(self.pos + 1), Some(Token { kind: TokenKind::Colon, .. }));
        let query = match &token.kind {
            TokenKind::Word(word) if followed_by_colon => {
                let (name, offset) = (word.clone(), token.offset);
                self.pos += 2;
                self.parse_field_value(name, offset, depth)?
            }
            TokenKind::Word(_)
            | TokenKind::Phrase(..)
            | TokenKind::Regexp(_)
            | TokenKind::Range { .. }
            | TokenKind::LParen => self.parse_value(field, depth)?,
            _ => {
                let found = self.describe(self.pos);
                let message = match operator {
                    Some(op) => format!("expected a clause after {}, found {found}", self.describe(op)),
                    None => format!("unexpected {found}"),
                };
                return Err(ParseError::new(token.offset, message));
            }
        };
        match self.tokens.get(self.pos) {
            Some(&Token { kind: TokenKind::Boost(boost), offset, .. }) => {
                self.pos += 1;
                query.boosted(boost).map_err(|m| ParseError::new(offset, m))
            }
            _ => Ok(query),
        }
    }

    /// The value after `name:` (already consumed); `offset` is where the name starts.
    fn parse_field_value(&mut self, name: Word, offset: usize, depth: usize) -> Result<Query, ParseError> {
        if is_lone_star(&name) {
            return match self.peek_kind() {
                Some(TokenKind::Word(value)) if is_lone_star(value) => {
                    self.pos += 1;
                    self.count_leaf(offset)?;
                    Ok(Query::MatchAll)
                }
                _ => Err(ParseError::new(offset, "'*' can only be used as a field in '*:*'")),
            };
        }
        let valid = !name.text.is_empty()
            && name.text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '@' | '-'));
        if !valid {
            return Err(ParseError::new(offset, format!("invalid field name '{}'", name.text)));
        }
        match self.tokens.get(self.pos) {
            None => Err(ParseError::new(offset, format!("field '{}' has no value", name.text))),
            Some(Token {
                kind:
                    TokenKind::Word(_)
                    | TokenKind::Phrase(..)
                    | TokenKind::Regexp(_)
                    | TokenKind::Range { .. }
                    | TokenKind::LParen,
                ..
            }) => self.parse_value(Some(&name.text), depth),
            Some(token) => Err(ParseError::new(
                token.offset,
                format!("expected a value for field '{}', found {}", name.text, self.describe(self.pos)),
            )),
        }
    }

    /// `WORD | PHRASE | range | "(" query ")"`, under `field` (explicit or inherited from a group).
    fn parse_value(&mut self, field: Option<&str>, depth: usize) -> Result<Query, ParseError> {
        let Token { kind, offset, .. } = self.tokens[self.pos].clone();
        self.pos += 1;
        let owned_field = || field.map(str::to_owned);
        match kind {
            TokenKind::Word(word) => {
                self.count_leaf(offset)?;
                word_query(field, word)
            }
            TokenKind::Phrase(text, slop) => {
                self.count_leaf(offset)?;
                Ok(Query::Phrase { field: owned_field(), text, slop })
            }
            TokenKind::Regexp(pattern) => {
                self.count_leaf(offset)?;
                let (flags, case_insensitive) = (super::ast::RegexpFlags::ALL, false);
                Ok(Query::Regexp { field: owned_field(), pattern, flags, case_insensitive })
            }
            TokenKind::Range { lower, upper } => {
                let Some(field) = field else {
                    return Err(ParseError::new(offset, "range query needs a field, as in 'price:[1 TO 5]'"));
                };
                self.count_leaf(offset)?;
                Ok(Query::Range { field: field.to_owned(), lower, upper })
            }
            TokenKind::LParen => {
                if depth >= MAX_DEPTH {
                    return Err(ParseError::new(
                        offset,
                        format!("parentheses nested too deeply (the limit is {MAX_DEPTH} levels)"),
                    ));
                }
                if self.peek_kind() == Some(&TokenKind::RParen) {
                    return Err(ParseError::new(offset, "empty group '()'"));
                }
                let clauses = self.parse_query(field, depth + 1)?;
                if self.peek_kind() != Some(&TokenKind::RParen) {
                    return Err(ParseError::new(offset, "unclosed parenthesis"));
                }
                self.pos += 1;
                Ok(build(clauses))
            }
            _ => Err(ParseError::new(offset, "expected a term, phrase, range or group")),
        }
    }

    fn count_leaf(&mut self, offset: usize) -> Result<(), ParseError> {
        self.leaves += 1;
        if self.leaves > MAX_QUERY_CLAUSES {
            return Err(ParseError::new(
                offset,
                format!("too many clauses (the limit is {MAX_QUERY_CLAUSES})"),
            ));
        }
        Ok(())
    }
}

/// Whether a word is a single unescaped `*`.
fn is_lone_star(word: &Word) -> bool {
    !word.escaped && word.text == "*"
}

/// A term, a prefix (`pre*`), match-all (`*`) or a wildcard pattern (`te?t*`).
fn word_query(field: Option<&str>, word: Word) -> Result<Query, ParseError> {
    let field = field.map(str::to_owned);
    if let Some((at, max_edits)) = word.fuzzy {
        if let Some(&(star, _)) = word.stars.first() {
            return Err(ParseError::new(star.min(at), "a fuzzy term ('~') cannot have a '*' or '?'"));
        }
        let options = super::ast::FuzzyOptions { max_edits, ..Default::default() };
        return Ok(Query::Fuzzy { field, text: word.text, options, analyzed: false });
    }
    match word.stars.as_slice() {
        [] => Ok(Query::Term { field, text: word.text }),
        [(_, index)] if index + 1 == word.text.len() && word.text.ends_with('*') => {
            if word.text.len() == 1 && field.is_none() {
                Ok(Query::MatchAll)
            } else {
                let mut prefix = word.text;
                prefix.pop();
                Ok(Query::Prefix { field, prefix })
            }
        }
        wilds => {
            // The pattern: the wildcards as they are, every other `*`, `?` and `\` escaped.
            let mut pattern = String::with_capacity(word.text.len() + 4);
            for (i, c) in word.text.char_indices() {
                if matches!(c, '*' | '?' | '\\') && !wilds.iter().any(|&(_, w)| w == i) {
                    pattern.push('\\');
                }
                pattern.push(c);
            }
            Ok(Query::Wildcard { field, pattern, case_insensitive: false })
        }
    }
}

/// Lucene classic's `addClause` with the default operator OR.
fn add_clause(clauses: &mut Vec<(Occur, Query)>, conj: Conj, modifier: Option<Occur>, query: Query) {
    if conj == Conj::And {
        if let Some((occur, _)) = clauses.last_mut() {
            if *occur != Occur::MustNot {
                *occur = Occur::Must;
            }
        }
    }
    let occur = match modifier {
        Some(occur) => occur,
        None if conj == Conj::And => Occur::Must,
        None => Occur::Should,
    };
    clauses.push((occur, query));
}

/// A single SHOULD clause stands for itself; anything else is a `Bool`.
fn build(mut clauses: Vec<(Occur, Query)>) -> Query {
    if clauses.len() == 1 && clauses[0].0 == Occur::Should {
        return clauses.pop().map(|(_, query)| query).unwrap_or_else(Query::bool);
    }
    let (mut must, mut should, mut must_not) = (Vec::new(), Vec::new(), Vec::new());
    for (occur, query) in clauses {
        match occur {
            Occur::Must => must.push(query),
            Occur::Should => should.push(query),
            Occur::MustNot => must_not.push(query),
        }
    }
    Query::Bool { must, should, must_not, filter: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::{Duration, Instant};

    // ---- helpers -------------------------------------------------------------------------------

    fn ok(input: &str) -> Query {
        parse(input).unwrap_or_else(|e| panic!("{input:?} failed: {e}"))
    }

    /// Asserts that `input` fails at `offset` with a message containing `needle`.
    fn fails(input: &str, offset: usize, needle: &str) {
        match parse(input) {
            Ok(q) => panic!("{input:?} parsed as {q:?}, expected an error"),
            Err(e) => {
                assert_eq!(e.offset, offset, "{input:?}: wrong offset in {e}");
                assert!(e.message.contains(needle), "{input:?}: message {:?} lacks {needle:?}", e.message);
            }
        }
    }

    fn t(text: &str) -> Query {
        Query::Term { field: None, text: text.into() }
    }

    fn ft(field: &str, text: &str) -> Query {
        Query::Term { field: Some(field.into()), text: text.into() }
    }

    fn phrase(field: Option<&str>, text: &str) -> Query {
        Query::Phrase { field: field.map(Into::into), text: text.into(), slop: 0 }
    }

    fn prefix(field: Option<&str>, prefix: &str) -> Query {
        Query::Prefix { field: field.map(Into::into), prefix: prefix.into() }
    }

    fn range(field: &str, lower: Bound<&str>, upper: Bound<&str>) -> Query {
        let own = |b: Bound<&str>| b.map(str::to_owned);
        Query::Range { field: field.into(), lower: own(lower), upper: own(upper) }
    }

    fn bool_q(must: Vec<Query>, should: Vec<Query>, must_not: Vec<Query>) -> Query {
        Query::Bool { must, should, must_not, filter: vec![] }
    }

    fn should(clauses: Vec<Query>) -> Query {
        bool_q(vec![], clauses, vec![])
    }

    use Bound::{Excluded as Ex, Included as In, Unbounded as Un};

    // ---- syntax ----------------------------------------------------------------------------------

    #[test]
    fn bare_word() {
        assert_eq!(ok("foo"), t("foo"));
        assert_eq!(ok("  foo\t"), t("foo"));
        assert_eq!(ok("héllo"), t("héllo"));
    }

    #[test]
    fn fuzzy_words() {
        let fz = |field: Option<&str>, text: &str, max_edits: Option<u8>| Query::Fuzzy {
            field: field.map(str::to_owned),
            text: text.into(),
            options: crate::query::FuzzyOptions { max_edits, ..Default::default() },
            analyzed: false,
        };
        assert_eq!(ok("roam~"), fz(None, "roam", None));
        assert_eq!(ok("title:roam~1"), fz(Some("title"), "roam", Some(1)));
        assert_eq!(ok("roam~0"), fz(None, "roam", Some(0)));
        assert_eq!(ok("AND~2"), fz(None, "AND", Some(2)));
        assert_eq!(ok("roam~2^3"), Query::Boost { query: Box::new(fz(None, "roam", Some(2))), boost: 3.0 });
    }

    #[test]
    fn field_term() {
        assert_eq!(ok("title:foo"), ft("title", "foo"));
        assert_eq!(ok("title: foo"), ft("title", "foo"));
        assert_eq!(ok("a.b@c-d_e9:x"), ft("a.b@c-d_e9", "x"));
    }

    #[test]
    fn words_keep_inner_specials() {
        assert_eq!(ok("wi-fi"), t("wi-fi"));
        assert_eq!(ok("c++"), t("c++"));
        assert_eq!(ok("yes!"), t("yes!"));
        assert_eq!(ok("a>b"), t("a>b"));
        // `?` is a wildcard, as in Lucene's syntax (see `wildcard_query`); escaped it is a character.
        assert_eq!(ok(r"what\?"), t("what?"));
        assert_eq!(ok("a&&b"), t("a&&b"));
        assert_eq!(ok("TO"), t("TO"));
    }

    #[test]
    fn lowercase_operators_are_words() {
        assert_eq!(ok("a and b"), should(vec![t("a"), t("and"), t("b")]));
        assert_eq!(ok("not"), t("not"));
    }

    #[test]
    fn phrase_query() {
        assert_eq!(ok(r#""a b c""#), phrase(None, "a b c"));
        assert_eq!(ok(r#"title:"a b""#), phrase(Some("title"), "a b"));
        assert_eq!(ok(r#""""#), phrase(None, ""));
        assert_eq!(ok(r#"foo"bar""#), should(vec![t("foo"), phrase(None, "bar")]));
    }

    #[test]
    fn default_phrase_slop() {
        let opts = ParseOptions { phrase_slop: 2 };
        let sloppy = |text: &str, slop| Query::Phrase { field: None, text: text.into(), slop };
        assert_eq!(parse_with(r#""a b""#, &opts).unwrap(), sloppy("a b", 2));
        assert_eq!(parse_with(r#""a b"~0"#, &opts).unwrap(), sloppy("a b", 0), "an explicit slop wins");
        assert_eq!(parse_with(r#""a b"~5"#, &opts).unwrap(), sloppy("a b", 5));
        assert_eq!(parse_with("a", &opts).unwrap(), t("a"));
        assert!(parse_with("a", &ParseOptions { phrase_slop: MAX_SLOP + 1 }).is_err());
    }

    #[test]
    fn phrase_slop() {
        let sloppy = |field: Option<&str>, text: &str, slop| Query::Phrase {
            field: field.map(Into::into),
            text: text.into(),
            slop,
        };
        assert_eq!(ok(r#""a b"~2"#), sloppy(None, "a b", 2));
        assert_eq!(ok(r#"title:"a b"~10"#), sloppy(Some("title"), "a b", 10));
        assert_eq!(ok(r#""a b"~0"#), phrase(None, "a b"));
        assert_eq!(ok(r#""a b"~3^2"#), boost(sloppy(None, "a b", 3), 2.0));
        assert_eq!(ok(r#"+"a b"~1 c"#), bool_q(vec![sloppy(None, "a b", 1)], vec![t("c")], vec![]));
        assert_eq!(ok(r#"("a b"~1)"#), sloppy(None, "a b", 1));
    }

    #[test]
    fn phrase_escapes() {
        assert_eq!(ok(r#""say \"hi\"""#), phrase(None, r#"say "hi""#));
        assert_eq!(ok(r#""back\\slash""#), phrase(None, r"back\slash"));
        assert_eq!(ok(r#""a:b (c) *""#), phrase(None, "a:b (c) *"));
    }

    #[test]
    fn prefix_query() {
        assert_eq!(ok("pre*"), prefix(None, "pre"));
        assert_eq!(ok("title:pre*"), prefix(Some("title"), "pre"));
        assert_eq!(ok(r"pre\**"), prefix(None, "pre*"));
        assert_eq!(ok(r"pre\*"), t("pre*"));
    }

    #[test]
    fn wildcard_query() {
        let w = |field: Option<&str>, pattern: &str| Query::Wildcard {
            field: field.map(Into::into),
            pattern: pattern.into(),
            case_insensitive: false,
        };
        assert_eq!(ok("te?t"), w(None, "te?t"));
        assert_eq!(ok("*foo"), w(None, "*foo"));
        assert_eq!(ok("title:fo*o"), w(Some("title"), "fo*o"));
        assert_eq!(ok("foo**"), w(None, "foo**"));
        assert_eq!(ok("foo?"), w(None, "foo?"), "a trailing '?' is one character, not a prefix");
        // Escaped wildcards and backslashes are literal in the pattern; an escaped word stays a term.
        assert_eq!(ok(r"a\*b?"), w(None, r"a\*b?"));
        assert_eq!(ok(r"a\*b*"), prefix(None, "a*b"));
        assert_eq!(ok(r"a\\b?"), w(None, r"a\\b?"));
        assert_eq!(ok(r"what\?"), t("what?"));
        assert_eq!(ok("+a* -b?c"), bool_q(vec![prefix(None, "a")], vec![], vec![w(None, "b?c")]));
    }

    #[test]
    fn regexp_query() {
        let re = |field: Option<&str>, pattern: &str| Query::Regexp {
            field: field.map(Into::into),
            pattern: pattern.into(),
            flags: crate::query::RegexpFlags::ALL,
            case_insensitive: false,
        };
        assert_eq!(ok("/joh?n(ath[oa]n)/"), re(None, "joh?n(ath[oa]n)"));
        assert_eq!(ok("name:/a b/^2"), re(Some("name"), "a b").boosted(2.0).unwrap());
        // `\/` is a slash; other escapes stay for the pattern (`\.` a literal dot, `\\` a backslash).
        assert_eq!(ok(r"/a\/b\.c\\/"), re(None, r"a/b\.c\\"));
        assert_eq!(ok("+/x.*/ -y"), bool_q(vec![re(None, "x.*")], vec![], vec![t("y")]));
        // Only at a token's start: inside a word a slash is a character.
        assert_eq!(ok("and/or"), t("and/or"));
        let e = parse("body:/jo.*").unwrap_err();
        assert_eq!(e.offset, 5);
        assert!(e.message.contains("unclosed regular expression"), "{}", e.message);
    }

    #[test]
    fn match_all() {
        assert_eq!(ok("*"), Query::MatchAll);
        assert_eq!(ok("*:*"), Query::MatchAll);
        assert_eq!(ok("-*:* +a"), bool_q(vec![t("a")], vec![], vec![Query::MatchAll]));
        assert_eq!(ok(r"\*"), t("*"));
    }

    #[test]
    fn field_star_is_empty_prefix() {
        assert_eq!(ok("title:*"), prefix(Some("title"), ""));
        assert_eq!(ok("title:(*)"), prefix(Some("title"), ""));
    }

    #[test]
    fn inclusive_exclusive_and_mixed_ranges() {
        assert_eq!(ok("price:[10 TO 20]"), range("price", In("10"), In("20")));
        assert_eq!(ok("price:{10 TO 20}"), range("price", Ex("10"), Ex("20")));
        assert_eq!(ok("price:[10 TO 20}"), range("price", In("10"), Ex("20")));
        assert_eq!(ok("price:{10 TO 20]"), range("price", Ex("10"), In("20")));
        assert_eq!(ok("price:[ -5   TO\t5 ]"), range("price", In("-5"), In("5")));
    }

    #[test]
    fn unbounded_ranges() {
        assert_eq!(ok("date:{* TO 2015-01-01]"), range("date", Un, In("2015-01-01")));
        assert_eq!(ok("date:[2015 TO *]"), range("date", In("2015"), Un));
        assert_eq!(ok("date:[* TO *]"), range("date", Un, Un));
    }

    #[test]
    fn range_bounds_quoted_and_escaped() {
        assert_eq!(ok(r#"f:["*" TO "a b"]"#), range("f", In("*"), In("a b")));
        assert_eq!(ok(r"f:[\* TO a\]b]"), range("f", In("*"), In("a]b")));
        assert_eq!(ok(r#"f:[a TO "TO"]"#), range("f", In("a"), In("TO")));
        assert_eq!(ok("t:[10:00 TO 12:00]"), range("t", In("10:00"), In("12:00")));
    }

    #[test]
    fn comparison_ranges() {
        assert_eq!(ok("age:>5"), range("age", Ex("5"), Un));
        assert_eq!(ok("age:>=5"), range("age", In("5"), Un));
        assert_eq!(ok("age:<5"), range("age", Un, Ex("5")));
        assert_eq!(ok("age:<=5"), range("age", Un, In("5")));
        assert_eq!(ok("age:>-5"), range("age", Ex("-5"), Un));
        assert_eq!(ok(r#"d:>="2015 01""#), range("d", In("2015 01"), Un));
        assert_eq!(
            ok("age:(>=10 AND <20)"),
            bool_q(vec![range("age", In("10"), Un), range("age", Un, Ex("20"))], vec![], vec![])
        );
    }

    #[test]
    fn modifiers() {
        assert_eq!(ok("+a"), bool_q(vec![t("a")], vec![], vec![]));
        assert_eq!(ok("-a"), bool_q(vec![], vec![], vec![t("a")]));
        assert_eq!(ok("NOT a"), bool_q(vec![], vec![], vec![t("a")]));
        assert_eq!(ok("!a"), bool_q(vec![], vec![], vec![t("a")]));
        assert_eq!(ok("+ a"), bool_q(vec![t("a")], vec![], vec![]));
        assert_eq!(ok("a +b -c"), bool_q(vec![t("b")], vec![t("a")], vec![t("c")]));
        assert_eq!(ok("a NOT b"), bool_q(vec![], vec![t("a")], vec![t("b")]));
    }

    #[test]
    fn modifiers_on_phrases_groups_fields_ranges() {
        assert_eq!(ok(r#"-"a b""#), bool_q(vec![], vec![], vec![phrase(None, "a b")]));
        assert_eq!(ok("+(a b)"), bool_q(vec![should(vec![t("a"), t("b")])], vec![], vec![]));
        assert_eq!(ok("NOT (a b)"), bool_q(vec![], vec![], vec![should(vec![t("a"), t("b")])]));
        assert_eq!(ok("-title:x"), bool_q(vec![], vec![], vec![ft("title", "x")]));
        assert_eq!(ok("+p:[1 TO 2]"), bool_q(vec![range("p", In("1"), In("2"))], vec![], vec![]));
    }

    #[test]
    fn default_operator_is_or() {
        assert_eq!(ok("a b c"), should(vec![t("a"), t("b"), t("c")]));
    }

    #[test]
    fn and_operator() {
        let both = bool_q(vec![t("a"), t("b")], vec![], vec![]);
        assert_eq!(ok("a AND b"), both);
        assert_eq!(ok("a && b"), both);
        assert_eq!(ok("a AND b AND c"), bool_q(vec![t("a"), t("b"), t("c")], vec![], vec![]));
    }

    #[test]
    fn or_operator() {
        let either = should(vec![t("a"), t("b")]);
        assert_eq!(ok("a OR b"), either);
        assert_eq!(ok("a || b"), either);
        assert_eq!(ok("+a OR b"), bool_q(vec![t("a")], vec![t("b")], vec![]));
    }

    #[test]
    fn mixed_operators_follow_lucene_classic() {
        // Each AND makes its neighbours required; OR changes nothing.
        assert_eq!(ok("a OR b AND c"), bool_q(vec![t("b"), t("c")], vec![t("a")], vec![]));
        assert_eq!(ok("a AND b OR c"), bool_q(vec![t("a"), t("b")], vec![t("c")], vec![]));
        assert_eq!(ok("a b AND c"), bool_q(vec![t("b"), t("c")], vec![t("a")], vec![]));
        // A prohibited neighbour stays prohibited.
        assert_eq!(ok("a AND -b"), bool_q(vec![t("a")], vec![], vec![t("b")]));
        assert_eq!(ok("-a AND b"), bool_q(vec![t("b")], vec![], vec![t("a")]));
        assert_eq!(ok("a AND NOT b"), bool_q(vec![t("a")], vec![], vec![t("b")]));
    }

    #[test]
    fn groups() {
        assert_eq!(ok("(a b) +c"), bool_q(vec![t("c")], vec![should(vec![t("a"), t("b")])], vec![]));
        assert_eq!(ok("(a OR b) AND c"), bool_q(vec![should(vec![t("a"), t("b")]), t("c")], vec![], vec![]));
        assert_eq!(ok("((a))"), t("a"));
        assert_eq!(ok("(a)b"), should(vec![t("a"), t("b")]));
        assert_eq!(ok("(+a)"), bool_q(vec![t("a")], vec![], vec![]));
    }

    #[test]
    fn field_groups() {
        assert_eq!(ok("title:(a b)"), should(vec![ft("title", "a"), ft("title", "b")]));
        assert_eq!(ok("title:(a)"), ft("title", "a"));
        assert_eq!(
            ok(r#"title:(+a -"b c" body:d pre* (e))"#),
            bool_q(
                vec![ft("title", "a")],
                vec![ft("body", "d"), prefix(Some("title"), "pre"), ft("title", "e")],
                vec![phrase(Some("title"), "b c")],
            )
        );
        assert_eq!(
            ok("price:([1 TO 2] OR [5 TO *])"),
            should(vec![range("price", In("1"), In("2")), range("price", In("5"), Un)])
        );
    }

    #[test]
    fn backslash_escapes() {
        assert_eq!(ok(r"\+a"), t("+a"));
        assert_eq!(ok(r"\-a"), t("-a"));
        assert_eq!(ok(r"a\:b"), t("a:b"));
        assert_eq!(ok(r"\(a\)"), t("(a)"));
        assert_eq!(ok(r#"\"a"#), t("\"a"));
        assert_eq!(ok(r"a\\b"), t(r"a\b"));
        assert_eq!(ok(r"\[a\]\{b\}"), t("[a]{b}"));
        assert_eq!(ok(r"a\ b"), t("a b"));
        assert_eq!(ok(r"\^\~\!"), t("^~!"));
        assert_eq!(ok(r"\AND"), t("AND"));
        assert_eq!(ok(r"\&&"), t("&&"));
        assert_eq!(ok(r"\>5"), t(">5"));
        assert_eq!(ok(r"title\:x"), t("title:x"));
    }

    #[test]
    fn single_should_is_unwrapped_and_pure_negative_is_fine() {
        assert_eq!(ok("a"), t("a"));
        assert_eq!(ok("(a)"), t("a"));
        assert_eq!(ok("-a -b"), bool_q(vec![], vec![], vec![t("a"), t("b")]));
        assert_eq!(ok("-(a)"), bool_q(vec![], vec![], vec![t("a")]));
    }

    #[test]
    fn never_uses_filter() {
        fn no_filter(q: &Query) -> bool {
            match q {
                Query::Bool { must, should, must_not, filter } => {
                    filter.is_empty() && must.iter().chain(should).chain(must_not).all(no_filter)
                }
                _ => true,
            }
        }
        assert!(no_filter(&ok("+a -b c AND (d -e) f:[1 TO 2]")));
    }

    // ---- errors ----------------------------------------------------------------------------------

    #[test]
    fn error_display_and_trait() {
        let e = parse(r#"foo OR "bar"#).unwrap_err();
        assert_eq!(e, ParseError { offset: 7, message: "unclosed quote".into() });
        assert_eq!(e.to_string(), "query syntax error at offset 7: unclosed quote");
        let boxed: Box<dyn std::error::Error> = Box::new(e);
        assert!(boxed.to_string().contains("unclosed quote"));
    }

    #[test]
    fn error_empty_query() {
        fails("", 0, "empty query");
        fails(" \t\n ", 0, "empty query");
    }

    #[test]
    fn error_unclosed_quote() {
        fails(r#"title:"abc"#, 6, "unclosed quote");
        fails(r#""abc\""#, 0, "unclosed quote");
        fails(r#""abc\"#, 0, "unclosed quote");
        fails(r#"é "x"#, 3, "unclosed quote");
    }

    #[test]
    fn error_unclosed_parenthesis() {
        fails("(a b", 0, "unclosed parenthesis");
        fails("a (b (c)", 2, "unclosed parenthesis");
        fails("title:(a", 6, "unclosed parenthesis");
    }

    #[test]
    fn error_unbalanced_parenthesis() {
        fails("a)", 1, "unbalanced parenthesis");
        fails("(a)) b", 3, "unbalanced parenthesis");
        fails(")", 0, "unbalanced parenthesis");
    }

    #[test]
    fn error_unclosed_range() {
        fails("price:[1 TO 5", 6, "unclosed range");
        fails("price:{1", 6, "unclosed range");
    }

    #[test]
    fn error_malformed_range() {
        fails("price:[1 5]", 9, "expected 'TO'");
        fails("price:[1 TO]", 6, "incomplete range");
        fails("price:[]", 6, "incomplete range");
        fails("price:[1 TO 5 7]", 14, "expected ']'");
        fails("age:>", 4, "expected a value right after '>'");
        fails("age:>= 5", 4, "expected a value right after '>='");
    }

    #[test]
    fn error_range_without_field() {
        fails("[1 TO 5]", 0, "range query needs a field");
        fails("a {1 TO 5}", 2, "range query needs a field");
        fails(">5", 0, "range query needs a field");
        fails("(<=5)", 1, "range query needs a field");
    }

    #[test]
    fn error_dangling_operator() {
        fails("a AND", 2, "dangling operator 'AND'");
        fails("a ||", 2, "dangling operator '||'");
        fails("+", 0, "dangling operator '+'");
        fails("a -", 2, "dangling operator '-'");
        fails("a NOT", 2, "dangling operator 'NOT'");
        fails("(a AND)", 6, "expected a clause after 'AND', found ')'");
        fails("a AND OR b", 6, "expected a clause after 'AND', found 'OR'");
        fails("--a", 1, "expected a clause after '-', found '-'");
    }

    #[test]
    fn error_leading_conjunction() {
        fails("AND a", 0, "must come between two clauses");
        fails("(OR a)", 1, "must come between two clauses");
    }

    #[test]
    fn error_empty_group() {
        fails("()", 0, "empty group");
        fails("a ( )", 2, "empty group");
        fails("title:()", 6, "empty group");
    }

    #[test]
    fn error_field_without_value() {
        fails("title:", 0, "field 'title' has no value");
        fails("a title:  ", 2, "field 'title' has no value");
        fails("(title:)", 7, "expected a value for field 'title', found ')'");
        fails("title:AND", 6, "expected a value for field 'title'");
        fails("title:-x", 6, "expected a value for field 'title'");
    }

    #[test]
    fn error_bad_field_names_and_colons() {
        fails("ti*:x", 0, "invalid field name 'ti*'");
        fails(r"a\ b:x", 0, "invalid field name 'a b'");
        fails("*:foo", 0, "'*' can only be used as a field in '*:*'");
        fails(":foo", 0, "unexpected ':'");
        fails("a:b:c", 3, "unexpected ':'");
        fails(r#""a":b"#, 3, "unexpected ':'");
    }

    fn boost(q: Query, boost: f32) -> Query {
        Query::Boost { query: Box::new(q), boost }
    }

    #[test]
    fn boosts() {
        assert_eq!(ok("foo^2"), boost(t("foo"), 2.0));
        assert_eq!(ok("title:dune^0.5"), boost(ft("title", "dune"), 0.5));
        assert_eq!(ok(r#""a b"^1.5"#), boost(phrase(None, "a b"), 1.5));
        assert_eq!(ok("pre*^3"), boost(prefix(None, "pre"), 3.0));
        assert_eq!(ok("*:*^2"), boost(Query::MatchAll, 2.0));
        assert_eq!(
            ok("price:[1 TO 5]^2"),
            boost(range("price", Bound::Included("1"), Bound::Included("5")), 2.0)
        );
        // A group's boost applies to the group; the field reaches inside it as always.
        assert_eq!(ok("title:(a b)^4"), boost(should(vec![ft("title", "a"), ft("title", "b")]), 4.0));
        // Modifiers and operators see the boosted clause.
        assert_eq!(ok("+a^2 b"), bool_q(vec![boost(t("a"), 2.0)], vec![t("b")], vec![]));
        assert_eq!(ok("a^2 AND b^3"), bool_q(vec![boost(t("a"), 2.0), boost(t("b"), 3.0)], vec![], vec![]));
        // A boost of 1 adds nothing; 0 is allowed (the clause matches but adds no score).
        assert_eq!(ok("foo^1"), t("foo"));
        assert_eq!(ok("foo^0"), boost(t("foo"), 0.0));
        // An escaped caret is part of the word.
        assert_eq!(ok(r"a\^2"), t("a^2"));
    }

    #[test]
    fn boost_errors() {
        fails("foo^", 3, "followed by a number");
        fails("foo^-1", 3, "followed by a number");
        fails("foo^x", 3, "followed by a number");
        fails("foo^1.2.3", 3, "followed by a number");
        fails("^2 foo", 0, "unexpected '^2'");
        fails("foo^2^3", 5, "unexpected '^3'");
    }

    #[test]
    fn error_unsupported_syntax() {
        fails("te?t~1", 2, "fuzzy");
        fails("foo~3", 3, "fuzzy");
        fails("foo~0.8", 3, "fuzzy");
        fails("foo~1~", 3, "fuzzy");
        fails("fo*~1", 2, "fuzzy");
        fails(r#""a b"~"#, 5, "whole number");
        fails(r#""a b"~2.5"#, 5, "whole number");
        fails(r#""a b"~x"#, 5, "whole number");
        fails(r#""a b"~-1"#, 5, "whole number");
        fails(r#""a b"~99999999999"#, 5, "whole number");
        fails(r#""a b" ~2"#, 6, "'~' must follow a word");
        fails("a]", 1, "unexpected ']' outside a range");
        fails("}", 0, "unexpected '}' outside a range");
        fails(r"a\", 1, "escape character");
    }

    #[test]
    fn error_too_many_clauses() {
        let at_limit = vec!["a"; MAX_QUERY_CLAUSES].join(" ");
        assert!(parse(&at_limit).is_ok());
        let over = format!("{at_limit} zz");
        fails(&over, at_limit.len() + 1, "too many clauses");
        // Leaves count across groups and `*:*`.
        let nested = format!("({}) *:*", vec!["a"; MAX_QUERY_CLAUSES].join(" "));
        fails(&nested, nested.len() - 3, "too many clauses");
    }

    #[test]
    fn error_too_deep() {
        let ok_depth = format!("{}a{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert_eq!(ok(&ok_depth), t("a"));
        let too_deep = format!("{}a{}", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
        fails(&too_deep, MAX_DEPTH, "nested too deeply");
        let with_ops = format!("{}a{}", "+(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
        fails(&with_ops, 2 * MAX_DEPTH + 1, "nested too deeply");
    }

    #[test]
    fn huge_inputs_are_fast_and_do_not_overflow_the_stack() {
        let start = Instant::now();
        fails(&"(".repeat(1_000_000), MAX_DEPTH, "nested too deeply");
        fails(&"a ".repeat(1_000_000), 2 * MAX_QUERY_CLAUSES, "too many clauses");
        fails(&format!("\"{}", "a ".repeat(1_000_000)), 0, "unclosed quote");
        fails(&format!("f:[{}", "a ".repeat(1_000_000)), 2, "unclosed range");
        fails(&"-".repeat(1_000_000), 1, "expected a clause after '-'");
        assert!(ok(&format!("a{}", "b".repeat(1_000_000))) != Query::MatchAll);
        assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    }

    // ---- property tests ------------------------------------------------------------------------

    /// Pieces rich in special characters, operators and keywords.
    const PIECES: &[&str] = &[
        "+", "-", "!", "(", ")", ":", "\"", "*", "[", "]", "{", "}", "^", "~", "\\", " ", " ", "AND", "OR",
        "NOT", "TO", "&&", "||", "title:", ">", ">=", "<", "<=", "a", "b", "xy", "é", "\t",
    ];

    proptest! {
        #[test]
        fn random_strings_never_panic(pieces in prop::collection::vec(prop::sample::select(PIECES), 0..60)) {
            let input = pieces.concat();
            let start = Instant::now();
            let result = parse(&input);
            prop_assert!(start.elapsed() < Duration::from_secs(1), "{input:?} took {:?}", start.elapsed());
            if let Err(e) = result {
                prop_assert!(e.offset <= input.len() && input.is_char_boundary(e.offset), "{input:?}: {e}");
                prop_assert!(!e.message.is_empty());
            }
        }

        #[test]
        fn arbitrary_strings_never_panic(input in "\\PC{0,40}") {
            if let Err(e) = parse(&input) {
                prop_assert!(e.offset <= input.len() && input.is_char_boundary(e.offset), "{input:?}: {e}");
            }
        }

        #[test]
        fn printed_asts_parse_back((query, seed) in (arb_query(), any::<u64>())) {
            let printed = print(&query, &mut Style(seed | 1));
            let parsed = parse(&printed);
            prop_assert_eq!(parsed, Ok(normalize(query)), "printed as {:?}", printed);
        }
    }

    // ---- AST generation, printing and normalisation for the round trip ---------------------------

    fn field_name() -> impl Strategy<Value = String> + Clone {
        prop::sample::select(&["title", "body", "a.b", "x_y-z@w", "f1"][..]).prop_map(str::to_owned)
    }

    /// Mostly plain words; sometimes ones full of characters that need escaping, or keywords.
    fn word_text() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => "[a-z]{1,8}",
            2 => "[a-zA-Z0-9 +\\-!():\"*\\[\\]{}^~\\\\/?&|<>.@é]{1,8}",
            1 => prop::sample::select(&["AND", "OR", "NOT", "TO", "&&", "||", "*"][..])
                .prop_map(str::to_owned),
        ]
    }

    /// A wildcard pattern a query-string word makes: letters, escaped `*` `?` `\\`, and wildcards — not a
    /// lone trailing `*` (that word is a prefix).
    fn wildcard_pattern() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(&["a", "b", "é", "*", "?", "\\*", "\\?", "\\\\"][..]);
        prop::collection::vec(piece, 1..7).prop_map(|v| v.concat()).prop_filter("not a prefix", |p| {
            crate::query::Pattern::parse(p).is_ok_and(|x| x.wildcards() > 0 && !x.is_prefix())
        })
    }

    fn phrase_text() -> impl Strategy<Value = String> {
        "[a-z \"\\\\*:()]{0,12}"
    }

    fn bound() -> impl Strategy<Value = Bound<String>> {
        let value = prop_oneof![
            3 => "[a-z0-9]{1,6}",
            1 => "[a-z0-9 *\\-:\\]}\"\\\\]{1,6}",
            1 => Just("*".to_owned()),
        ];
        prop_oneof![
            value.clone().prop_map(Bound::Included),
            value.prop_map(Bound::Excluded),
            Just(Bound::Unbounded),
        ]
    }

    fn leaf() -> impl Strategy<Value = Query> {
        let field = prop::option::of(field_name());
        prop_oneof![
            4 => (field.clone(), word_text()).prop_map(|(field, text)| Query::Term { field, text }),
            2 => (field.clone(), phrase_text(), prop::sample::select(&[0u32, 0, 1, 3][..]))
                .prop_map(|(field, text, slop)| Query::Phrase { field, text, slop }),
            2 => (field.clone(), word_text()).prop_map(|(field, prefix)| Query::Prefix { field, prefix }),
            1 => (field.clone(), wildcard_pattern())
                .prop_map(|(field, pattern)| Query::Wildcard { field, pattern, case_insensitive: false }),
            1 => (field, "([a-z/.*+?|()]|\\\\[.])+").prop_map(|(field, pattern)| Query::Regexp {
                field,
                pattern,
                flags: crate::query::RegexpFlags::ALL,
                case_insensitive: false
            }),
            2 => (field_name(), bound(), bound())
                .prop_map(|(field, lower, upper)| Query::Range { field, lower, upper }),
            1 => Just(Query::MatchAll),
        ]
    }

    /// `q`, sometimes boosted by a factor that prints exactly (never 1: the parser adds no node for it).
    fn maybe_boosted(q: impl Strategy<Value = Query>) -> impl Strategy<Value = Query> {
        (q, prop::option::weighted(0.2, prop::sample::select(&[0.0f32, 0.5, 2.0, 2.5, 10.0][..]))).prop_map(
            |(query, boost)| match boost {
                Some(boost) => Query::Boost { query: Box::new(query), boost },
                None => query,
            },
        )
    }

    fn arb_query() -> impl Strategy<Value = Query> {
        maybe_boosted(leaf()).prop_recursive(3, 40, 4, |inner| {
            let clauses = || prop::collection::vec(inner.clone(), 0..3);
            maybe_boosted(
                (clauses(), clauses(), clauses())
                    .prop_filter("a group needs a clause", |(m, s, n)| m.len() + s.len() + n.len() > 0)
                    .prop_map(|(must, should, must_not)| Query::Bool {
                        must,
                        should,
                        must_not,
                        filter: vec![],
                    }),
            )
        })
    }

    /// What the parser produces for a printed AST: single-SHOULD bools collapse to their clause.
    fn normalize(query: Query) -> Query {
        match query {
            Query::Bool { must, should, must_not, filter } => {
                let all = |v: Vec<Query>| v.into_iter().map(normalize).collect::<Vec<_>>();
                let (must, mut should, must_not, filter) =
                    (all(must), all(should), all(must_not), all(filter));
                if must.is_empty() && must_not.is_empty() && filter.is_empty() && should.len() == 1 {
                    should.pop().unwrap()
                } else {
                    Query::Bool { must, should, must_not, filter }
                }
            }
            Query::Boost { query, boost } => Query::Boost { query: Box::new(normalize(*query)), boost },
            other => other,
        }
    }

    /// Pseudo-random choices for the printer (xorshift), so one AST is printed in many equivalent ways.
    struct Style(u64);

    impl Style {
        fn pick(&mut self, n: u64) -> u64 {
            crate::rng::xorshift(&mut self.0) % n
        }

        fn flip(&mut self) -> bool {
            self.pick(2) == 0
        }
    }

    fn print(query: &Query, style: &mut Style) -> String {
        match query {
            Query::Bool { must, should, must_not, .. } if style.flip() => {
                print_bool(must, should, must_not, None, style)
            }
            _ => print_clause(query, None, style),
        }
    }

    /// The field every leaf under `query` has, if they all have the same one.
    fn common_field(query: &Query) -> Option<&str> {
        match query {
            Query::MatchAll => None,
            Query::Term { field, .. }
            | Query::Phrase { field, .. }
            | Query::Prefix { field, .. }
            | Query::Wildcard { field, .. }
            | Query::Regexp { field, .. } => field.as_deref(),
            Query::Range { field, .. } => Some(field),
            Query::Bool { must, should, must_not, filter } => {
                let mut fields = must.iter().chain(should).chain(must_not).chain(filter).map(common_field);
                let first = fields.next()??;
                fields.all(|f| f == Some(first)).then_some(first)
            }
            Query::Boost { query, .. } => common_field(query),
            Query::AtLeast { .. }
            | Query::ConstantScore { .. }
            | Query::DisMax { .. }
            | Query::Ids { .. }
            | Query::Fuzzy { .. }
            | Query::PhrasePrefix { .. }
            | Query::Analyzed { .. } => {
                unreachable!("the generator makes only what the query string can express")
            }
        }
    }

    /// Bool clauses, interleaved at random (keeping each list's order), with `+`/`-`/`NOT`/`!` and
    /// optional conjunctions that do not change the meaning: OR anywhere, AND between non-SHOULDs.
    fn print_bool(
        must: &[Query],
        should: &[Query],
        must_not: &[Query],
        ctx: Option<&str>,
        style: &mut Style,
    ) -> String {
        let mut lists =
            [(Occur::Must, must.iter()), (Occur::Should, should.iter()), (Occur::MustNot, must_not.iter())];
        let mut remaining = must.len() + should.len() + must_not.len();
        let mut out = String::new();
        let mut previous: Option<Occur> = None;
        while remaining > 0 {
            let mut skip = style.pick(remaining as u64) as usize;
            let (occur, query) = lists
                .iter_mut()
                .find_map(|(occur, iter)| {
                    let len = iter.len();
                    if skip < len {
                        Some((*occur, iter.next().unwrap()))
                    } else {
                        skip -= len;
                        None
                    }
                })
                .unwrap();
            remaining -= 1;
            if let Some(prev) = previous {
                out.push(' ');
                match style.pick(4) {
                    0 => out.push_str(if style.flip() { "OR " } else { "|| " }),
                    1 if prev != Occur::Should && occur != Occur::Should => {
                        out.push_str(if style.flip() { "AND " } else { "&& " })
                    }
                    _ => {}
                }
            }
            out.push_str(match occur {
                Occur::Must => "+",
                Occur::Should => "",
                Occur::MustNot => ["-", "NOT ", "!"][style.pick(3) as usize],
            });
            out.push_str(&print_clause(query, ctx, style));
            previous = Some(occur);
        }
        out
    }

    /// One clause; `ctx` is the field inherited from an enclosing `field:( )` group.
    fn print_clause(query: &Query, ctx: Option<&str>, style: &mut Style) -> String {
        let field_prefix = |field: Option<&str>, style: &mut Style| match (field, ctx) {
            (Some(f), Some(c)) if f == c && style.flip() => String::new(),
            (Some(f), _) => format!("{f}:"),
            (None, None) => String::new(),
            (None, Some(_)) => unreachable!("field-less leaf inside a field group"),
        };
        match query {
            Query::MatchAll => if ctx.is_none() && style.flip() { "*" } else { "*:*" }.to_owned(),
            Query::Term { field, text } => field_prefix(field.as_deref(), style) + &escape_word(text),
            Query::Phrase { field, text, slop } => {
                let slop = if *slop > 0 { format!("~{slop}") } else { String::new() };
                format!("{}\"{}\"{slop}", field_prefix(field.as_deref(), style), escape_phrase(text))
            }
            Query::Prefix { field, prefix } => {
                field_prefix(field.as_deref(), style) + &escape_word(prefix) + "*"
            }
            Query::Wildcard { field, pattern, .. } => {
                // The pattern's escapes read back as the query string's; its wildcards stay as they are.
                let mut out = field_prefix(field.as_deref(), style);
                let mut chars = pattern.chars();
                while let Some(c) = chars.next() {
                    match c {
                        '*' | '?' => out.push(c),
                        '\\' => out += &escape_word(&chars.next().expect("a whole escape").to_string()),
                        c => out += &escape_word(&c.to_string()),
                    }
                }
                out
            }
            Query::Regexp { field, pattern, .. } => {
                // A `/` of the pattern escaped, its other characters (escapes too) as they are.
                let mut out = field_prefix(field.as_deref(), style) + "/";
                let mut chars = pattern.chars();
                while let Some(c) = chars.next() {
                    match c {
                        '/' => out.push_str("\\/"),
                        '\\' => {
                            out.push(c);
                            out.push(chars.next().expect("a whole escape"));
                        }
                        c => out.push(c),
                    }
                }
                out + "/"
            }
            Query::Range { field, lower, upper } => {
                field_prefix(Some(field), style) + &print_range(lower, upper, style)
            }
            Query::Bool { must, should, must_not, .. } => match common_field(query) {
                Some(f) if ctx != Some(f) || style.flip() => {
                    format!("{f}:({})", print_bool(must, should, must_not, Some(f), style))
                }
                _ => format!("({})", print_bool(must, should, must_not, ctx, style)),
            },
            Query::Boost { query, boost } => format!("{}^{boost}", print_clause(query, ctx, style)),
            Query::AtLeast { .. }
            | Query::ConstantScore { .. }
            | Query::DisMax { .. }
            | Query::Ids { .. }
            | Query::Fuzzy { .. }
            | Query::PhrasePrefix { .. }
            | Query::Analyzed { .. } => {
                unreachable!("the query string cannot express these")
            }
        }
    }

    fn print_range(lower: &Bound<String>, upper: &Bound<String>, style: &mut Style) -> String {
        let value = |v: &str, style: &mut Style| {
            if style.flip() {
                format!("\"{}\"", escape_phrase(v))
            } else {
                v.chars()
                    .map(|c| if c.is_alphanumeric() { c.to_string() } else { format!("\\{c}") })
                    .collect()
            }
        };
        match (lower, upper) {
            (Bound::Unbounded, Bound::Included(v)) if style.flip() => {
                format!("<={}", value(v, style))
            }
            (Bound::Unbounded, Bound::Excluded(v)) if style.flip() => {
                format!("<{}", value(v, style))
            }
            (Bound::Included(v), Bound::Unbounded) if style.flip() => {
                format!(">={}", value(v, style))
            }
            (Bound::Excluded(v), Bound::Unbounded) if style.flip() => {
                format!(">{}", value(v, style))
            }
            _ => {
                let (open, lo) = match lower {
                    Bound::Included(v) => ("[", value(v, style)),
                    Bound::Excluded(v) => ("{", value(v, style)),
                    Bound::Unbounded => (["[", "{"][style.pick(2) as usize], "*".to_owned()),
                };
                let (close, hi) = match upper {
                    Bound::Included(v) => ("]", value(v, style)),
                    Bound::Excluded(v) => ("}", value(v, style)),
                    Bound::Unbounded => (["]", "}"][style.pick(2) as usize], "*".to_owned()),
                };
                format!("{open}{lo} TO {hi}{close}")
            }
        }
    }

    /// Escapes every character that could be special in a word, and keywords.
    fn escape_word(text: &str) -> String {
        let mut out = String::new();
        if matches!(text, "AND" | "OR" | "NOT") {
            out.push('\\');
        }
        for c in text.chars() {
            if c.is_whitespace() || "\\+-!():\"*?[]{}^~<>&|/".contains(c) {
                out.push('\\');
            }
            out.push(c);
        }
        out
    }

    fn escape_phrase(text: &str) -> String {
        text.chars().flat_map(|c| if matches!(c, '"' | '\\') { vec!['\\', c] } else { vec![c] }).collect()
    }
}
