use super::*;
use proptest::prelude::*;

/// The naive reference tokenizer the fast path must equal. Lowercasing is char-wise
/// (`char::to_lowercase`, all chars of the expansion), not `str::to_lowercase`, whose final-sigma rule
/// would make `ΣΑΣ` lowercase to `σας`.
fn reference_tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|s| !s.is_empty())
        .map(|s| s.chars().flat_map(char::to_lowercase).collect())
        .collect()
}

/// The reference analyzer: reference tokens, positions counting every token, then the filters.
fn reference_analyze(config: AnalyzerConfig, text: &str) -> (Vec<(String, u32)>, u32) {
    let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
    let tokens = reference_tokens(text);
    let n = tokens.len() as u32;
    let out = tokens
        .into_iter()
        .enumerate()
        .filter(|(_, t)| t.len() <= MAX_TOKEN_BYTES)
        .filter(|(_, t)| !(config.stop_words && ENGLISH_STOP_WORDS.contains(&t.as_str())))
        .map(|(i, t)| {
            let t = if config.stemming { stemmer.stem(&t).into_owned() } else { t };
            (t, i as u32)
        })
        .collect();
    (out, n)
}

fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    tokenize(text, &mut |t| out.push(t.to_owned()));
    out
}

fn terms(config: AnalyzerConfig, text: &str) -> Vec<(String, u32)> {
    Analyzer::new(config).analyze_to_vec(text)
}

fn pairs(v: &[(&str, u32)]) -> Vec<(String, u32)> {
    v.iter().map(|&(t, p)| (t.to_owned(), p)).collect()
}

const STOP: AnalyzerConfig = AnalyzerConfig { stop_words: true, stemming: false };
const STEM: AnalyzerConfig = AnalyzerConfig { stop_words: false, stemming: true };

// ---------------------------------------------------------------- tokenizer

#[test]
fn tokenizes_ascii() {
    assert_eq!(tokens("Hello, World! foo_bar BAZ9 x"), ["hello", "world", "foo", "bar", "baz9", "x"]);
    assert_eq!(tokens("already lowercase 123"), ["already", "lowercase", "123"]);
    assert_eq!(tokens("wi-fi e-mail 3.14 C++ don't"), ["wi", "fi", "e", "mail", "3", "14", "c", "don", "t"]);
    assert_eq!(tokens("MiXeD\tCase\nLines\r\n"), ["mixed", "case", "lines"]);
    assert_eq!(tokens("\0a\0B\x7f"), ["a", "b"]);
}

#[test]
fn empty_and_whitespace_only() {
    assert!(tokens("").is_empty());
    assert!(tokens("   \t\n\r  ").is_empty());
    assert!(tokens("  ,.;!? -- ").is_empty());
    assert!(tokens("\u{a0}\u{2003}\u{3000}—…").is_empty()); // Unicode spaces and punctuation
    let a = Analyzer::new(AnalyzerConfig::english());
    let mut called = false;
    assert_eq!(a.analyze("", &mut |_, _| called = true), 0);
    assert_eq!(a.analyze(" \t\n ", &mut |_, _| called = true), 0);
    assert!(!called);
}

#[test]
fn tokenizes_unicode() {
    assert_eq!(tokens("Café CAFÉ naïve"), ["café", "café", "naïve"]);
    assert_eq!(tokens("Ünïcödé"), ["ünïcödé"]);
    assert_eq!(tokens("abcÉfgH"), ["abcéfgh"]); // fast path -> Unicode path mid-token
    assert_eq!(tokens("ÉTÉ été"), ["été", "été"]); // Unicode path at token start, back to fast path
    assert_eq!(tokens("foo—bar…baz"), ["foo", "bar", "baz"]); // non-ASCII separators
    assert_eq!(tokens("a😀b 😀 c"), ["a", "b", "c"]); // emoji separate
    assert_eq!(tokens("東京タワー 北京"), ["東京タワー", "北京"]); // CJK runs stay whole (no segmentation)
    assert_eq!(tokens("Straße"), ["straße"]);
    assert_eq!(tokens("١٢٣ ٤"), ["١٢٣", "٤"]); // Arabic-Indic digits are numeric
}

#[test]
fn lowercasing_is_char_wise() {
    // Final sigma: char-wise lowercasing gives σ everywhere (str::to_lowercase would give "σας").
    assert_eq!(tokens("ΣΑΣ ΟΔΥΣΣΕΥΣ"), ["σασ", "οδυσσευσ"]);
    assert_ne!("ΣΑΣ".to_lowercase(), "σασ");
    // Turkish dotted capital I expands to i + combining dot above.
    assert_eq!(tokens("İstanbul"), ["i\u{307}stanbul"]);
    // Kelvin sign (3 bytes) lowercases to ASCII k.
    assert_eq!(tokens("\u{212A}elvin"), ["kelvin"]);
}

#[test]
fn combining_marks_follow_is_alphanumeric() {
    // U+0301 COMBINING ACUTE is not alphanumeric: it separates, exactly like the reference.
    let s = "e\u{301}te\u{301}";
    assert_eq!(tokens(s), reference_tokens(s));
    // U+0345 COMBINING YPOGEGRAMMENI is alphabetic (Other_Alphabetic) and stays in the token.
    let s = "α\u{345}β";
    assert_eq!(tokens(s), reference_tokens(s));
    assert_eq!(tokens(s).len(), 1);
}

#[test]
fn tokenize_with_buffer_reuses_buffer() {
    let mut buf = String::new();
    let mut out = Vec::new();
    tokenize_with_buffer("ABC déf", &mut buf, &mut |t| out.push(t.to_owned()));
    tokenize_with_buffer("GHI", &mut buf, &mut |t| out.push(t.to_owned()));
    assert_eq!(out, ["abc", "déf", "ghi"]);
}

// ---------------------------------------------------------------- analyzer

#[test]
fn positions_count_every_token() {
    let a = Analyzer::default();
    assert_eq!(a.config(), AnalyzerConfig { stop_words: false, stemming: false });
    let mut seen = Vec::new();
    let n = a.analyze("The quick brown fox", &mut |t, p| seen.push((t.to_owned(), p)));
    assert_eq!(n, 4);
    assert_eq!(seen, pairs(&[("the", 0), ("quick", 1), ("brown", 2), ("fox", 3)]));
}

#[test]
fn stop_words_keep_their_positions() {
    let a = Analyzer::new(STOP);
    let mut seen = Vec::new();
    let n = a.analyze("The quick brown fox is in the den", &mut |t, p| seen.push((t.to_owned(), p)));
    assert_eq!(n, 8);
    assert_eq!(seen, pairs(&[("quick", 1), ("brown", 2), ("fox", 3), ("den", 7)]));
    // A phrase cannot match across a removed stop word: the gap is visible in the positions.
    assert_eq!(terms(STOP, "quick the fox"), pairs(&[("quick", 0), ("fox", 2)]));
    // Only stop words: nothing indexed, positions still consumed.
    let mut called = false;
    assert_eq!(a.analyze("To be or not to be", &mut |_, _| called = true), 6);
    assert!(!called);
    // Stop words are matched after lowercasing.
    assert_eq!(terms(STOP, "THE End"), pairs(&[("end", 1)]));
    // Without the option they are indexed.
    assert_eq!(terms(AnalyzerConfig::default(), "the end"), pairs(&[("the", 0), ("end", 1)]));
}

#[test]
fn stop_word_list_is_lucenes() {
    assert_eq!(ENGLISH_STOP_WORDS.len(), 33);
    assert!(ENGLISH_STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    for w in ENGLISH_STOP_WORDS {
        assert!(is_stop_word(w), "{w}");
    }
    for w in ["", "i", "we", "were", "has", "the ", "The", "thes", "an d", "ther"] {
        assert!(!is_stop_word(w), "{w:?}");
    }
}

#[test]
fn stemming_examples() {
    let cases = [
        ("running", "run"),
        ("runs", "run"),
        ("flies", "fli"),
        ("cats", "cat"),
        ("caresses", "caress"),
        ("ponies", "poni"),
        ("generously", "generous"),
        ("happiness", "happi"),
        ("connection", "connect"),
        ("relational", "relat"),
        ("skies", "sky"), // Snowball English exception list
        ("news", "news"), // invariant exception
        ("dying", "die"),
        ("run", "run"),
    ];
    for (word, stem) in cases {
        assert_eq!(terms(STEM, word), pairs(&[(stem, 0)]), "{word}");
    }
    // Lowercased before stemming.
    assert_eq!(terms(STEM, "RUNNING Flies"), pairs(&[("run", 0), ("fli", 1)]));
}

#[test]
fn stemming_after_stop_word_removal() {
    let a = Analyzer::new(AnalyzerConfig::english());
    assert_eq!(a.config(), AnalyzerConfig { stop_words: true, stemming: true });
    assert_eq!(
        a.analyze_to_vec("The runners were running into the hills"),
        pairs(&[("runner", 1), ("were", 2), ("run", 3), ("hill", 6)])
    );
    // "this" is a stop word; its stem ("thi") is not, yet the token is removed: the check is on the
    // unstemmed token.
    assert_eq!(a.analyze_to_vec("this"), vec![]);
    // Stemming alone keeps stop words (stemmed).
    assert_eq!(terms(STEM, "this is"), pairs(&[("this", 0), ("is", 1)]));
}

#[test]
fn overlong_tokens_are_dropped_but_counted() {
    let a = Analyzer::default();
    let ok = "a".repeat(MAX_TOKEN_BYTES);
    let long = "b".repeat(MAX_TOKEN_BYTES + 1);
    let text = format!("x {ok} {long} y");
    let mut seen = Vec::new();
    assert_eq!(a.analyze(&text, &mut |t, p| seen.push((t.to_owned(), p))), 4);
    assert_eq!(seen, vec![("x".to_owned(), 0), (ok.clone(), 1), ("y".to_owned(), 3)]);

    // Length is in bytes of the lowercased token: 128 × 'é' = 256 bytes is too long, 127 is fine.
    let text = format!("{} {} z", "É".repeat(128), "é".repeat(127));
    assert_eq!(a.analyze_to_vec(&text), vec![("é".repeat(127), 1), ("z".to_owned(), 2)]);

    // Uppercase ASCII path and an enormous token.
    let text = format!("{} after", "Q".repeat(100_000));
    assert_eq!(a.analyze_to_vec(&text), pairs(&[("after", 1)]));

    // Also with stemming on.
    assert_eq!(terms(AnalyzerConfig::english(), &format!("{long} cats")), pairs(&[("cat", 1)]));
}

#[test]
fn analyze_from_continues_positions() {
    let a = Analyzer::new(STOP);
    let mut seen = Vec::new();
    let end = a.analyze("red the green", &mut |t, p| seen.push((t.to_owned(), p)));
    assert_eq!(end, 3);
    let end = a.analyze_from("blue sky", end + 100, &mut |t, p| seen.push((t.to_owned(), p)));
    assert_eq!(end, 105);
    assert_eq!(seen, pairs(&[("red", 0), ("green", 2), ("blue", 103), ("sky", 104)]));
    assert_eq!(a.analyze_from("", 7, &mut |_, _| {}), 7);
    assert_eq!(a.analyze_from("a b c", u32::MAX - 1, &mut |_, _| {}), u32::MAX);
}

#[test]
fn normalize_prefix_lowercases_only() {
    let a = Analyzer::new(AnalyzerConfig::english());
    assert_eq!(a.normalize_prefix("Runn"), "runn");
    assert_eq!(a.normalize_prefix("RUNNING"), "running"); // not stemmed
    assert_eq!(a.normalize_prefix("The"), "the"); // not stop-word filtered
    assert_eq!(a.normalize_prefix("CAFÉ"), "café");
    assert_eq!(a.normalize_prefix("ΣΑΣ"), "σασ"); // same char-wise rule as the tokenizer
    assert_eq!(a.normalize_prefix("İ"), "i\u{307}");
    assert_eq!(a.normalize_prefix(""), "");
    // A prefix's lowercasing agrees with the tokenizer's on any alphanumeric text.
    for word in ["Straße", "ÜBER", "東京", "\u{212A}elvin", "MiXeD123"] {
        assert_eq!(vec![a.normalize_prefix(word)], tokens(word));
    }
}

#[test]
fn keyword_normalize_is_identity() {
    assert_eq!(keyword_normalize("Foo Bar-BAZ é"), "Foo Bar-BAZ é");
    assert_eq!(keyword_normalize(""), "");
}

#[test]
fn analyzer_is_send_sync_clone_debug() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Analyzer>();
    let a = Analyzer::new(AnalyzerConfig::english());
    let b = a.clone();
    assert_eq!(b.config(), a.config());
    assert_eq!(b.analyze_to_vec("Cats"), pairs(&[("cat", 0)]));
    assert!(format!("{a:?}").contains("stemming: true"));
    // Shared across threads.
    let a = std::sync::Arc::new(a);
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let a = a.clone();
            std::thread::spawn(move || a.analyze_to_vec("flies running"))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), pairs(&[("fli", 0), ("run", 1)]));
    }
}

// ---------------------------------------------------------------- properties

/// Chars chosen to hit every branch: ASCII letters of both cases, digits, ASCII punctuation and
/// whitespace, accented letters, CJK, emoji, Greek capital sigma, Turkish İ, the Kelvin sign, combining
/// marks (alphanumeric and not), non-ASCII digits and separators.
fn interesting_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => prop::char::range('a', 'z'),
        3 => prop::char::range('A', 'Z'),
        2 => prop::char::range('0', '9'),
        3 => prop::sample::select(vec![' ', ' ', '\t', '\n', ',', '.', '-', '_', '\'', '"', '!', '\0', '\x7f']),
        3 => prop::sample::select(vec![
            'é', 'É', 'ü', 'Ü', 'ß', 'ø', 'Å', 'ç', 'ñ', 'Ñ', 'œ', 'Œ',
            'Σ', 'σ', 'ς', 'Α', 'Ω', 'İ', 'ı', 'I', '\u{212A}', '\u{2126}',
            '東', '京', '中', 'タ', 'ー', '한', '글',
            '😀', '👍', '\u{1F1FA}', '\u{200D}', '\u{FE0F}',
            '\u{301}', '\u{308}', '\u{345}', '\u{5B4}',
            '١', '٢', '²', '½', 'Ⅻ', 'ǅ', 'ᾼ',
            '\u{a0}', '\u{2003}', '\u{3000}', '—', '…', '€', '\u{feff}',
        ]),
        1 => any::<char>(),
    ]
}

fn interesting_string() -> impl Strategy<Value = String> {
    prop::collection::vec(interesting_char(), 0..80).prop_map(|v| v.into_iter().collect())
}

fn any_config() -> impl Strategy<Value = AnalyzerConfig> {
    (any::<bool>(), any::<bool>()).prop_map(|(stop_words, stemming)| AnalyzerConfig { stop_words, stemming })
}

proptest! {
    #[test]
    fn tokenizer_equals_reference(s in interesting_string()) {
        prop_assert_eq!(tokens(&s), reference_tokens(&s));
    }

    #[test]
    fn tokenizer_equals_reference_on_arbitrary_strings(s in any::<String>()) {
        prop_assert_eq!(tokens(&s), reference_tokens(&s));
    }

    #[test]
    fn tokenizer_equals_reference_on_mostly_ascii_words(
        words in prop::collection::vec("[a-zA-Z0-9]{0,12}|[a-zA-Z]{0,5}[éÉΣİ東😀][a-zA-Z]{0,5}", 0..20),
        seps in prop::collection::vec("[ ,.!\n]{1,3}|[—\u{3000}😀]", 20),
    ) {
        let mut s = String::new();
        for (w, sep) in words.iter().zip(&seps) {
            s.push_str(w);
            s.push_str(sep);
        }
        prop_assert_eq!(tokens(&s), reference_tokens(&s));
    }

    #[test]
    fn tokenizer_equals_reference_across_64_byte_chunks(
        words in prop::collection::vec("[a-zA-Z0-9]{0,70}|[a-z]{0,3}[éΣİ][A-Z]{0,3}", 0..40),
        seps in prop::collection::vec("[ ,.!\n]{1,3}|[—😀]|[ ]{60,70}", 40),
        skip in 0usize..64,
    ) {
        // Long runs of ASCII (tokens and separators longer than a chunk, tokens straddling chunk ends, at
        // every alignment) mixed with non-ASCII ones.
        let mut s = "x".repeat(skip);
        s.push(' ');
        for (w, sep) in words.iter().zip(&seps) {
            s.push_str(w);
            s.push_str(sep);
        }
        prop_assert_eq!(tokens(&s), reference_tokens(&s));
    }

    #[test]
    fn analyzer_equals_reference(config in any_config(), s in interesting_string()) {
        let a = Analyzer::new(config);
        let mut seen = Vec::new();
        let n = a.analyze(&s, &mut |t, p| seen.push((t.to_owned(), p)));
        let (expected, expected_n) = reference_analyze(config, &s);
        prop_assert_eq!(seen, expected);
        prop_assert_eq!(n, expected_n);
    }

    #[test]
    fn analyzer_equals_reference_with_stop_words_and_long_tokens(
        config in any_config(),
        words in prop::collection::vec(
            prop_oneof![
                prop::sample::select(ENGLISH_STOP_WORDS.to_vec()).prop_map(str::to_owned),
                prop::sample::select(vec!["The", "IS", "running", "Flies", "cats"]).prop_map(str::to_owned),
                "[a-zA-Zé]{250,260}",
                "[a-z]{1,8}",
            ],
            0..12,
        ),
    ) {
        let s = words.join(" ");
        let a = Analyzer::new(config);
        let (expected, expected_n) = reference_analyze(config, &s);
        let mut seen = Vec::new();
        let n = a.analyze(&s, &mut |t, p| seen.push((t.to_owned(), p)));
        prop_assert_eq!(seen, expected);
        prop_assert_eq!(n, expected_n);
    }

    #[test]
    fn spans_give_the_analyzed_terms_and_their_text(config in any_config(), s in "[a-zA-Z0-9é ,.İΣ-]{0,80}") {
        let a = Analyzer::new(config);
        let mut spans = Vec::new();
        a.analyze_spans(&s, &mut |t, r| spans.push((t.to_owned(), r)));
        let terms: Vec<String> = a.analyze_to_vec(&s).into_iter().map(|(t, _)| t).collect();
        prop_assert_eq!(spans.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>(), terms);
        for (t, r) in &spans {
            // Each span is one whole token whose own analysis is the term.
            let piece = &s[r.clone()];
            prop_assert!(piece.chars().all(char::is_alphanumeric));
            prop_assert_eq!(a.analyze_to_vec(piece).into_iter().map(|(t, _)| t).collect::<Vec<_>>(), vec![t.clone()]);
        }
    }
}

/// The thread's reused lowercasing buffer carries nothing from one analysis to the next (nor into one
/// re-entered from a sink): every text analyzes as it does with a buffer of its own.
#[test]
fn the_reused_token_buffer_carries_nothing_over() {
    let a = Analyzer::new(AnalyzerConfig::simple());
    let texts = ["LONGUPPERCASEWORD Ab", "x", "ÉTÉ Ωmega straße", "a", "MiXeD CaSe wOrDs", ""];
    let own = |t: &str| {
        let mut out = vec![];
        a.analyze_with_buffer(t, 0, &mut String::new(), &mut |tok, p| out.push((tok.to_string(), p)));
        out
    };
    for _ in 0..2 {
        for t in texts {
            assert_eq!(a.analyze_to_vec(t), own(t), "{t:?}");
        }
    }
    // A sink that analyzes again on the same thread.
    let mut nested = vec![];
    a.analyze("OUTER Words", &mut |tok, _| nested.push((tok.to_string(), a.analyze_to_vec("INNER Ünïcode"))));
    let inner = own("INNER Ünïcode");
    assert_eq!(nested, vec![("outer".to_string(), inner.clone()), ("words".to_string(), inner)]);
}
