//! Inline SVG charts (scatter/line charts and grouped bars) for the HTML report. Every chart
//! is self-contained markup: no script, no external reference, no `xmlns` URL (inline SVG in
//! HTML5 needs none). Points and bars carry a CSS class (`pt <series>`, `bar <series>`) and a
//! `<title>` tooltip, so they can be counted by tests and inspected by hovering.

use std::fmt::Write;

use super::{esc, f3};

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Filled circles.
    Dots,
    /// Filled diamonds.
    Diamonds,
    /// A post-step line (value holds until the next point), with no markers.
    Step,
    /// A horizontal dashed line at the first point's `y`, across the whole plot.
    HLine,
    /// Crosses on the x axis at each point's `x` (`y` is ignored).
    AxisCross,
}

/// One point, with its tooltip.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// X value.
    pub x: f64,
    /// Y value.
    pub y: f64,
    /// Tooltip text (escaped when rendered).
    pub title: String,
}

/// A named set of points drawn in one style.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// CSS class suffix (`pt <class>`), lowercase, no spaces.
    pub class: &'static str,
    /// Fill/stroke colour.
    pub color: &'static str,
    /// How it is drawn.
    pub style: Style,
    /// The points.
    pub points: Vec<Point>,
}

/// An x/y chart of several series.
#[derive(Debug, Clone, PartialEq)]
pub struct XyChart {
    /// Title above the plot.
    pub title: String,
    /// X-axis label.
    pub x_label: String,
    /// Y-axis label.
    pub y_label: String,
    /// The series, drawn in order (later on top).
    pub series: Vec<Series>,
    /// Whether x ticks must be integers (iterations).
    pub integer_x: bool,
}

const W: f64 = 560.0;
const H: f64 = 340.0;
const ML: f64 = 58.0;
const MR: f64 = 16.0;
const MT: f64 = 30.0;
const MB: f64 = 48.0;

/// "Nice" tick values covering `[lo, hi]` (about `n` of them): steps of 1, 2 or 5 × 10^k.
pub fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() * step;
    let mut out = Vec::new();
    let mut k = 0.0;
    while first + k * step <= hi + step * 1e-9 {
        // round away float noise (0.6000000000000001) and -0.0
        let v = ((first + k * step) * 1e12).round() / 1e12;
        out.push(if v == 0.0 { 0.0 } else { v });
        k += 1.0;
    }
    out
}

fn tick_label(v: f64, step: f64) -> String {
    if step >= 1.0 && (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        let decimals = (-step.log10().floor()).clamp(0.0, 6.0) as usize;
        format!("{v:.decimals$}")
    }
}

fn range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    (lo <= hi).then_some((lo, hi))
}

fn padded((lo, hi): (f64, f64)) -> (f64, f64) {
    let span = hi - lo;
    if span < 1e-12 {
        let d = if lo.abs() > 1e-9 { lo.abs() * 0.1 } else { 0.5 };
        (lo - d, hi + d)
    } else {
        (lo - span * 0.06, hi + span * 0.06)
    }
}

fn legend(out: &mut String, items: &[(&str, &str, Style)], y: f64) {
    // laid out left to right below the plot, wrapping when too wide
    let mut x = ML;
    let mut row_y = y;
    for (label, color, style) in items {
        let w = 30.0 + 7.0 * label.chars().count() as f64;
        if x + w > W - MR && x > ML {
            x = ML;
            row_y += 16.0;
        }
        let cx = x + 7.0;
        let cy = row_y - 4.0;
        match style {
            Style::Dots => {
                let _ = write!(out, r#"<circle cx="{cx}" cy="{cy}" r="4" fill="{color}"/>"#);
            }
            Style::Diamonds => {
                let _ = write!(out, "{}</polygon>", diamond(cx, cy, 5.0, color, ""));
            }
            Style::Step => {
                let _ = write!(
                    out,
                    r#"<line x1="{}" y1="{cy}" x2="{}" y2="{cy}" stroke="{color}" stroke-width="2.5"/>"#,
                    cx - 7.0,
                    cx + 7.0
                );
            }
            Style::HLine => {
                let _ = write!(
                    out,
                    r#"<line x1="{}" y1="{cy}" x2="{}" y2="{cy}" stroke="{color}" stroke-width="2" stroke-dasharray="5 3"/>"#,
                    cx - 7.0,
                    cx + 7.0
                );
            }
            Style::AxisCross => {
                let _ = write!(out, "{}</path>", cross(cx, cy, 4.0, color, ""));
            }
        }
        let _ = write!(
            out,
            r#"<text x="{}" y="{row_y}" class="lg">{}</text>"#,
            x + 18.0,
            esc(label)
        );
        x += w;
    }
}

/// An open `<polygon>` tag (the caller closes it, optionally after a `<title>`).
fn diamond(cx: f64, cy: f64, r: f64, color: &str, class: &str) -> String {
    let class = if class.is_empty() {
        String::new()
    } else {
        format!(r#" class="{class}""#)
    };
    format!(
        r#"<polygon{class} points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{color}" stroke="white" stroke-width="1">"#,
        cx,
        cy - r,
        cx + r,
        cy,
        cx,
        cy + r,
        cx - r,
        cy
    )
}

/// An open `<path>` tag drawing an ×.
fn cross(cx: f64, cy: f64, r: f64, color: &str, class: &str) -> String {
    let class = if class.is_empty() {
        String::new()
    } else {
        format!(r#" class="{class}""#)
    };
    format!(
        r#"<path{class} d="M{:.1},{:.1}L{:.1},{:.1}M{:.1},{:.1}L{:.1},{:.1}" stroke="{color}" stroke-width="2.2">"#,
        cx - r,
        cy - r,
        cx + r,
        cy + r,
        cx - r,
        cy + r,
        cx + r,
        cy - r
    )
}

impl XyChart {
    /// Render as an `<svg>` element (responsive: scales down to its container).
    pub fn render(&self) -> String {
        let legend_rows = 1.0 + (self.series.len() as f64 / 4.0).floor();
        let height = H + 16.0 * (legend_rows - 1.0);
        let plot_b = H - MB;
        let xr = range(
            self.series
                .iter()
                .filter(|s| s.style != Style::HLine)
                .flat_map(|s| s.points.iter().map(|p| p.x)),
        );
        let yr = range(
            self.series
                .iter()
                .filter(|s| s.style != Style::AxisCross)
                .flat_map(|s| s.points.iter().map(|p| p.y)),
        );
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg class="chart" viewBox="0 0 {W} {height}" role="img" aria-label="{}"><title>{}</title>"#,
            esc(&self.title),
            esc(&self.title)
        );
        let _ = write!(
            out,
            r#"<text x="{ML}" y="18" class="ct">{}</text>"#,
            esc(&self.title)
        );
        let (Some(xr), Some(yr)) = (xr, yr) else {
            let _ = write!(
                out,
                r#"<text x="{}" y="{}" class="empty" text-anchor="middle">no data</text></svg>"#,
                W / 2.0,
                H / 2.0
            );
            return out;
        };
        let (x0, x1) = if self.integer_x {
            let (a, b) = (xr.0.floor() - 0.5, xr.1.ceil() + 0.5);
            (a.min(b - 1.0), b)
        } else {
            padded(xr)
        };
        let (y0, y1) = padded(yr);
        let sx = |x: f64| ML + (x - x0) / (x1 - x0) * (W - ML - MR);
        let sy = |y: f64| plot_b - (y - y0) / (y1 - y0) * (plot_b - MT);
        // grid and ticks
        let yt = nice_ticks(y0, y1, 5);
        let ystep = if yt.len() > 1 { yt[1] - yt[0] } else { 1.0 };
        for t in &yt {
            let y = sy(*t);
            let _ = write!(
                out,
                r#"<line x1="{ML}" y1="{y:.1}" x2="{}" y2="{y:.1}" class="grid"/><text x="{}" y="{:.1}" class="tk" text-anchor="end">{}</text>"#,
                W - MR,
                ML - 6.0,
                y + 4.0,
                tick_label(*t, ystep)
            );
        }
        let mut xt = nice_ticks(x0, x1, 8);
        if self.integer_x {
            xt.retain(|t| (t - t.round()).abs() < 1e-9);
        }
        let xstep = if xt.len() > 1 { xt[1] - xt[0] } else { 1.0 };
        for t in &xt {
            let x = sx(*t);
            let _ = write!(
                out,
                r#"<line x1="{x:.1}" y1="{plot_b}" x2="{x:.1}" y2="{}" class="axis"/><text x="{x:.1}" y="{}" class="tk" text-anchor="middle">{}</text>"#,
                plot_b + 4.0,
                plot_b + 16.0,
                tick_label(*t, xstep)
            );
        }
        let _ = write!(
            out,
            r#"<rect x="{ML}" y="{MT}" width="{}" height="{}" class="frame"/>"#,
            W - ML - MR,
            plot_b - MT
        );
        // axis labels
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" class="al" text-anchor="middle">{}</text>"#,
            ML + (W - ML - MR) / 2.0,
            plot_b + 32.0,
            esc(&self.x_label)
        );
        let _ = write!(
            out,
            r#"<text x="14" y="{}" class="al" text-anchor="middle" transform="rotate(-90 14 {})">{}</text>"#,
            MT + (plot_b - MT) / 2.0,
            MT + (plot_b - MT) / 2.0,
            esc(&self.y_label)
        );
        // series
        for s in &self.series {
            let _ = write!(out, r#"<g class="series {}">"#, s.class);
            match s.style {
                Style::HLine => {
                    if let Some(p) = s.points.first() {
                        let y = sy(p.y);
                        let _ = write!(
                            out,
                            r#"<line class="hline {}" x1="{ML}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="{}" stroke-width="2" stroke-dasharray="6 4"><title>{}</title></line>"#,
                            s.class,
                            W - MR,
                            s.color,
                            esc(&p.title)
                        );
                    }
                }
                Style::Step => {
                    let mut d = String::new();
                    for (i, p) in s.points.iter().enumerate() {
                        let (x, y) = (sx(p.x), sy(p.y));
                        if i == 0 {
                            let _ = write!(d, "M{x:.1},{y:.1}");
                        } else {
                            let _ = write!(d, "H{x:.1}V{y:.1}");
                        }
                    }
                    if let Some(p) = s.points.last() {
                        let _ = write!(d, "H{:.1}", sx(p.x + 0.5).min(W - MR));
                    }
                    let _ = write!(
                        out,
                        r#"<path class="step {}" d="{d}" fill="none" stroke="{}" stroke-width="2.5"/>"#,
                        s.class, s.color
                    );
                }
                Style::Dots => {
                    for p in &s.points {
                        let _ = write!(
                            out,
                            r##"<circle class="pt {}" cx="{:.1}" cy="{:.1}" r="3.8" fill="{}" stroke="#fff" stroke-width="0.7"><title>{}</title></circle>"##,
                            s.class,
                            sx(p.x),
                            sy(p.y),
                            s.color,
                            esc(&p.title)
                        );
                    }
                }
                Style::Diamonds => {
                    for p in &s.points {
                        let _ = write!(
                            out,
                            "{}<title>{}</title></polygon>",
                            diamond(sx(p.x), sy(p.y), 6.0, s.color, &format!("pt {}", s.class)),
                            esc(&p.title)
                        );
                    }
                }
                Style::AxisCross => {
                    for p in &s.points {
                        let _ = write!(
                            out,
                            "{}<title>{}</title></path>",
                            cross(
                                sx(p.x),
                                plot_b - 6.0,
                                4.5,
                                s.color,
                                &format!("pt {}", s.class)
                            ),
                            esc(&p.title)
                        );
                    }
                }
            }
            out.push_str("</g>");
        }
        let items: Vec<(&str, &str, Style)> = self
            .series
            .iter()
            .map(|s| (s.label.as_str(), s.color, s.style))
            .collect();
        legend(&mut out, &items, H - 4.0);
        out.push_str("</svg>");
        out
    }
}

/// Grouped bars on a 0–1 scale: one group per category, one bar per series.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    /// Title above the plot.
    pub title: String,
    /// Category names (x axis).
    pub groups: Vec<String>,
    /// (label, css class, colour, one value per group) per series.
    pub series: Vec<(String, &'static str, &'static str, Vec<f64>)>,
}

impl BarChart {
    /// Render as an `<svg>` element.
    pub fn render(&self) -> String {
        let w = 640.0;
        let legend_rows = 1.0 + ((self.series.len().max(1) - 1) as f64 / 5.0).floor();
        let h = 300.0 + 16.0 * (legend_rows - 1.0);
        let plot_b = 300.0 - MB;
        let sy = |v: f64| plot_b - v.clamp(0.0, 1.0) * (plot_b - MT);
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg class="chart bars" viewBox="0 0 {w} {h}" role="img" aria-label="{}"><title>{}</title><text x="{ML}" y="18" class="ct">{}</text>"#,
            esc(&self.title),
            esc(&self.title),
            esc(&self.title)
        );
        for t in nice_ticks(0.0, 1.0, 5) {
            let y = sy(t);
            let _ = write!(
                out,
                r#"<line x1="{ML}" y1="{y:.1}" x2="{}" y2="{y:.1}" class="grid"/><text x="{}" y="{:.1}" class="tk" text-anchor="end">{t:.1}</text>"#,
                w - MR,
                ML - 6.0,
                y + 4.0
            );
        }
        let n_groups = self.groups.len().max(1) as f64;
        let n_series = self.series.len().max(1) as f64;
        let group_w = (w - ML - MR) / n_groups;
        let bar_w = (group_w * 0.8 / n_series).min(34.0);
        for (g, name) in self.groups.iter().enumerate() {
            let gx = ML + group_w * g as f64;
            let start = gx + (group_w - bar_w * n_series) / 2.0;
            for (s, (label, class, color, values)) in self.series.iter().enumerate() {
                let v = values.get(g).copied().unwrap_or(f64::NAN);
                if !v.is_finite() {
                    continue;
                }
                let x = start + bar_w * s as f64;
                let y = sy(v);
                let _ = write!(
                    out,
                    r#"<rect class="bar {class}" x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{} {}: {}</title></rect>"#,
                    (bar_w - 2.0).max(1.0),
                    (plot_b - y).max(0.0),
                    esc(label),
                    esc(name),
                    f3(v)
                );
            }
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{}" class="tk" text-anchor="middle">{}</text>"#,
                gx + group_w / 2.0,
                plot_b + 16.0,
                esc(name)
            );
        }
        let _ = write!(
            out,
            r#"<rect x="{ML}" y="{MT}" width="{}" height="{}" class="frame"/>"#,
            w - ML - MR,
            plot_b - MT
        );
        let _ = write!(
            out,
            r#"<text x="14" y="{}" class="al" text-anchor="middle" transform="rotate(-90 14 {})">Dice alignment</text>"#,
            MT + (plot_b - MT) / 2.0,
            MT + (plot_b - MT) / 2.0
        );
        // legend
        let mut x = ML;
        let mut y = 300.0 - 12.0;
        for (label, _, color, _) in &self.series {
            let lw = 32.0 + 7.2 * label.chars().count() as f64;
            if x + lw > w - MR && x > ML {
                x = ML;
                y += 16.0;
            }
            let _ = write!(
                out,
                r#"<rect x="{x}" y="{}" width="12" height="10" fill="{color}"/><text x="{}" y="{y}" class="lg">{}</text>"#,
                y - 9.0,
                x + 18.0,
                esc(label)
            );
            x += lw;
        }
        out.push_str("</svg>");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice_and_cover_the_range() {
        assert_eq!(nice_ticks(0.0, 1.0, 5), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(
            nice_ticks(0.5, 30.5, 8),
            [5.0, 10.0, 15.0, 20.0, 25.0, 30.0]
        );
        assert_eq!(tick_label(0.4, 0.2), "0.4");
        assert_eq!(tick_label(10.0, 5.0), "10");
    }

    #[test]
    fn chart_counts_points_and_escapes_titles() {
        let c = XyChart {
            title: "a<b".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![Series {
                label: "s&t".into(),
                class: "train",
                color: "#123",
                style: Style::Dots,
                points: (0..3)
                    .map(|i| Point {
                        x: i as f64,
                        y: i as f64,
                        title: "<p>".into(),
                    })
                    .collect(),
            }],
            integer_x: true,
        };
        let s = c.render();
        assert_eq!(s.matches(r#"class="pt train""#).count(), 3);
        assert!(s.contains("a&lt;b") && s.contains("s&amp;t") && !s.contains("<p>"));
    }
}
