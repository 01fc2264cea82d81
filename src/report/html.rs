//! Rendering: the report's plain data ([`super::page::Page`]) through the templates of
//! `src/report/templates/` (embedded in the binary). The text helpers every piece of HTML of
//! the report uses ([`esc`], [`f3`], ...) are in [`super::text`].
//!
//! Templates are [minijinja](https://docs.rs/minijinja) templates with auto-escaping through
//! [`esc`], the report's one escaper: every value a template prints is escaped unless it is
//! marked `|safe` (only SVG markup built by [`super::svg`], itself escaped there). Filters:
//! `f3` (3 decimals, `–` for none or not finite), `f4` (4 decimals), `int` (rounded, with
//! thousands separators, `–` for none), `pct` (a percentage, no decimals) and `duration`.
//!
//! Layout: the page shell (`page.html`) is used as written. Section templates are written
//! indented for reading; loading drops every line break with the indentation after it (the
//! page has no whitespace between elements), so a sentence of a template never spans lines.

use minijinja::value::{Serde, Value};
use minijinja::{AutoEscape, Environment};
use serde::Serialize;

use super::text::{duration, esc, f3, grouped};

/// The page shell: `<head>` with the style sheet, header, sections, footer.
const PAGE: &str = include_str!("templates/page.html");
/// The style sheet, inlined into the page.
pub(crate) const CSS: &str = include_str!("templates/style.css");
/// The section templates, in page order.
pub(crate) const SECTIONS: [(&str, &str); 10] = [
    ("summary", include_str!("templates/summary.html")),
    ("scores", include_str!("templates/scores.html")),
    ("map", include_str!("templates/map.html")),
    ("dice", include_str!("templates/dice.html")),
    ("eval", include_str!("templates/eval.html")),
    ("lineage", include_str!("templates/lineage.html")),
    ("personas", include_str!("templates/personas.html")),
    ("dialogues", include_str!("templates/dialogues.html")),
    ("mechanics", include_str!("templates/mechanics.html")),
    ("costs", include_str!("templates/costs.html")),
];

/// A section template as loaded: line breaks and the indentation after them dropped.
fn unindent(source: &str) -> String {
    source.lines().map(str::trim_start).collect()
}

/// The environment: the templates, the escaper and the filters.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.set_formatter(|out, _state, value| {
        if value.is_safe() {
            out.write_str(value.as_str().unwrap_or_default())?;
        } else if let Some(s) = value.as_str() {
            out.write_str(&esc(s))?;
        } else {
            out.write_str(&esc(&value.to_string()))?;
        }
        Ok(())
    });
    env.add_filter("f3", |x: Option<f64>| x.map_or_else(|| "–".into(), f3));
    env.add_filter("f4", |x: f64| format!("{x:.4}"));
    env.add_filter("int", |x: Option<f64>| {
        x.map_or_else(|| "–".into(), |v| grouped(v.round() as i64))
    });
    env.add_filter("duration", duration);
    env.add_filter("pct", |x: f64| format!("{x:.0}%"));
    let mut syntax = minijinja::syntax::SyntaxConfig::builder();
    syntax.keep_trailing_newline(true);
    env.set_syntax(syntax.build().expect("the default syntax"));
    env.add_template("page", PAGE).expect("page.html parses");
    for (name, source) in SECTIONS {
        env.add_template_owned(name, unindent(source))
            .expect("the report's templates parse");
    }
    env
}

/// Render the template `name` with `data`.
fn render(env: &Environment, name: &str, data: impl Serialize) -> String {
    env.get_template(name)
        .and_then(|t| t.render(Serde(data)))
        .unwrap_or_else(|e| panic!("the report's template {name} failed: {e:#}"))
}

/// The whole page: each section's data through its template, inside the page shell.
pub(crate) fn page(p: &super::page::Page) -> String {
    let env = environment();
    let body: String = [
        render(&env, "summary", &p.summary),
        render(&env, "scores", &p.scores),
        render(&env, "map", &p.map),
        render(&env, "dice", &p.dice),
        render(&env, "eval", &p.eval),
        render(&env, "lineage", &p.lineage),
        render(&env, "personas", &p.personas),
        render(&env, "dialogues", &p.dialogues),
        render(&env, "mechanics", &p.mechanics),
        render(&env, "costs", &p.costs),
    ]
    .concat();
    env.get_template("page")
        .and_then(|t| {
            t.render(minijinja::context! {
                title => &p.title,
                dir => &p.dir,
                version => env!("CARGO_PKG_VERSION"),
                css => Value::from_safe_string(CSS.to_string()),
                body => Value::from_safe_string(body),
            })
        })
        .unwrap_or_else(|e| panic!("the report's page template failed: {e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_url_schemes() {
        assert_eq!(
            esc(r#"<a href="https://x">&'"#),
            "&lt;a href=&quot;https&#58;//x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn parses_the_logs_times() {
        assert_eq!(duration(3725.0), "1 h 02 min 05 s");
        assert_eq!(duration(12.34), "12.3 s");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(-999), "-999");
        assert_eq!(grouped(1000), "1,000");
    }

    #[test]
    fn templates_escape_what_they_print_with_the_reports_escaper() {
        let env = environment();
        let out = env
            .render_str(
                "{{ x }}|{{ y|safe }}",
                minijinja::context! { x => "<b>\u{202e}https://", y => "<i>" },
            )
            .unwrap();
        assert_eq!(out, "&lt;b&gt;\\u{202e}https&#58;//|<i>");
    }
}
