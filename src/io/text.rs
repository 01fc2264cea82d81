//! Text safe to show: control characters and the bidi controls that reorder what a reader
//! sees, escaped.

/// Text safe to print on a terminal: control characters (escape sequences included) other
/// than newline and tab, and the bidi controls that reorder what a reader sees (see
/// [`is_bidi_control`]), are shown as `\u{..}` escapes. For anything an untrusted program, a
/// model or an input file wrote (stderr tails, generated text, ids) before it reaches a
/// terminal. Letters of right-to-left scripts are left as they are.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(unprintable) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unprintable(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

pub(super) fn unprintable(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || is_bidi_control(c)
}

/// The bidi embedding, override and isolate controls (U+202A–U+202E, U+2066–U+2069): they
/// reorder the text that follows them until their end, so that what a reader sees is not what
/// is there (a file name that reads `exe.png`, a sentence turned around). ppol never shows them
/// raw: [`printable`] on a terminal, [`neutralize_bidi`] in HTML pages,
/// [`to_json`](super::to_json) in JSON. They are the characters rustc's `text_direction_codepoint_in_literal` lint names. The
/// direction marks (U+200E LRM, U+200F RLM, U+061C ALM) are left alone: they are ordinary in
/// Arabic and Hebrew text and change only where neutral characters such as punctuation go,
/// not the order of letters.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// The text with every [bidi control](is_bidi_control) shown as a visible `\u{202e}` escape
/// and everything else (right-to-left letters and direction marks included) as it is: for
/// pages people read (the HTML report, the study page).
pub fn neutralize_bidi(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_bidi_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_bidi_control(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}
