//! The text helpers every piece of the report's HTML uses: the one escaper ([`esc`]) and the
//! number formats. A leaf: the data builders (`page`, `charts`, `svg`) and the renderer
//! (`html`) use it, it uses none of them.

/// HTML-escape text for element content and attribute values. Bidi controls, which would
/// reorder what a reader sees, and every C0 and C1 control character but newline and tab (ESC,
/// NUL, BEL, carriage return, U+0085, ...) are shown as visible `\u{202e}`, `\u{1b}` escapes,
/// as on the terminal ([`crate::io::printable`]); letters of right-to-left scripts are kept.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if crate::io::is_bidi_control(c) || (c.is_control() && c != '\n' && c != '\t') => {
                out.push_str(&c.escape_unicode().to_string())
            }
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // the colon of `scheme://` is escaped too, so that no URL appears in the page source
            ':' if chars.peek() == Some(&'/') => out.push_str("&#58;"),
            c => out.push(c),
        }
    }
    out
}

/// A number to 3 decimals (`–` when not finite).
pub fn f3(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "–".into()
    }
}

/// An integer with thousands separators (`1,234,567`).
pub(crate) fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// Seconds as `1 h 02 min 05 s`, `3 min 04 s` or `12.3 s` (`–` when not a duration).
pub(crate) fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "–".into();
    }
    let s = secs.round() as u64;
    let (h, m, s) = (s / 3600, (s % 3600) / 60, s % 60);
    if h > 0 {
        format!("{h} h {m:02} min {s:02} s")
    } else if m > 0 {
        format!("{m} min {s:02} s")
    } else {
        format!("{secs:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue34_item6_the_report_carries_no_raw_control_character() {
        let shown = esc("a\u{1b}[2J\u{0}b\u{7}\r\u{85}\u{9b}c\u{202e}d\n\te<&>");
        assert_eq!(
            shown,
            "a\\u{1b}[2J\\u{0}b\\u{7}\\u{d}\\u{85}\\u{9b}c\\u{202e}d\n\te&lt;&amp;&gt;"
        );
        assert!(!shown
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'));
        assert_eq!(esc("שלום é"), "שלום é");
    }
}
