//! Charts as inline SVG, so that a report is one file that opens offline and needs no
//! script or font to draw. Two kinds are enough: line charts (throughput against a
//! knob) and stacked bars (how epoch time splits).

use std::fmt::Write as _;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 48.0;

/// One line of a [`LineChart`].
pub(crate) struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    pub points: Vec<(f64, f64)>,
    /// Drawn dashed beyond this x (an extrapolation).
    pub dashed_after: Option<f64>,
}

/// A line chart: lines sharing axes, with a vertical marker at the configuration
/// analysed.
pub(crate) struct LineChart<'a> {
    /// What the chart shows, for screen readers and tooltips.
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub series: Vec<Series<'a>>,
    pub log_x: bool,
    pub marker: Option<(f64, &'a str)>,
    /// The top of the y axis; what lies above it is cut off. `None`: the highest point.
    pub y_max: Option<f64>,
}

impl LineChart<'_> {
    pub(super) fn svg(&self) -> String {
        let points = || self.series.iter().flat_map(|s| s.points.iter().copied());
        let (x_min, x_max) = bounds(points().map(|p| p.0));
        let y_max = self
            .y_max
            .unwrap_or_else(|| bounds(points().map(|p| p.1)).1);
        let x_axis = Axis::new(x_min, x_max, self.log_x);
        let y_axis = Axis::new(0.0, y_max.max(1e-9), false);
        let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
        let sx = |x: f64| LEFT + x_axis.unit(x) * plot_w;
        let sy = |y: f64| TOP + plot_h - y_axis.unit(y) * plot_h;
        let mut svg = open_svg(self.title);
        for t in y_axis.ticks() {
            let y = sy(t);
            let _ = write!(
                svg,
                r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#e3e3e3"/><text x="{:.1}" y="{:.1}" text-anchor="end" class="tick">{}</text>"##,
                LEFT + plot_w,
                LEFT - 6.0,
                y + 4.0,
                number(t)
            );
        }
        for t in x_axis.ticks() {
            let x = sx(t);
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{:.1}" stroke="#f0f0f0"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" class="tick">{}</text>"##,
                TOP + plot_h,
                TOP + plot_h + 16.0,
                number(t)
            );
        }
        let _ = write!(
            svg,
            r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w:.1}" height="{plot_h:.1}" fill="none" stroke="#888"/><text x="{:.1}" y="{:.1}" text-anchor="middle" class="label">{}</text><text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle" class="label">{}</text>"##,
            LEFT + plot_w / 2.0,
            HEIGHT - 10.0,
            escape(self.x_label),
            TOP + plot_h / 2.0,
            escape(self.y_label)
        );
        if let Some((x, label)) = self.marker {
            let x = sx(x.clamp(x_axis.min, x_axis.max));
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{:.1}" stroke="#555" stroke-dasharray="2 3"/><text x="{:.1}" y="{:.1}" class="tick">{}</text>"##,
                TOP + plot_h,
                x + 4.0,
                TOP + 12.0,
                escape(label)
            );
        }
        // The lines go in a viewport the size of the plot, so what lies above the y axis
        // is cut off at the edge instead of drawn along it as if it were the value there.
        let _ = write!(
            svg,
            r#"<svg x="{LEFT}" y="{TOP}" width="{plot_w:.1}" height="{plot_h:.1}" viewBox="{LEFT} {TOP} {plot_w:.1} {plot_h:.1}" class="plot">"#
        );
        for s in &self.series {
            let finite: Vec<_> = s.points.iter().filter(|p| p.1.is_finite()).collect();
            let split = s.dashed_after.unwrap_or(f64::INFINITY);
            let solid: Vec<_> = finite.iter().filter(|p| p.0 <= split).collect();
            let dashed: Vec<_> = finite.iter().filter(|p| p.0 >= split).collect();
            for (part, dash) in [(solid, ""), (dashed, r#" stroke-dasharray="6 4""#)] {
                if part.len() < 2 {
                    continue;
                }
                let path: Vec<String> = part
                    .iter()
                    .map(|p| format!("{:.1},{:.1}", sx(p.0), sy(p.1)))
                    .collect();
                let _ = write!(
                    svg,
                    r#"<polyline class="series" points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                    path.join(" "),
                    s.color
                );
            }
            for p in &finite {
                let _ = write!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"><title>{}: {} → {}</title></circle>"#,
                    sx(p.0),
                    sy(p.1),
                    s.color,
                    escape(s.name),
                    number(p.0),
                    number(p.1)
                );
            }
        }
        svg.push_str("</svg>");
        for (i, s) in self.series.iter().enumerate() {
            legend(&mut svg, i, s.name, s.color);
        }
        svg.push_str("</svg>");
        svg
    }
}

/// One bar of [`stacked_bars`]: a label and (share, name, colour) segments summing to 1.
pub(crate) struct Bar<'a> {
    pub label: &'a str,
    pub segments: Vec<(f64, &'a str, &'a str)>,
}

/// Horizontal bars, each split into shares of 100%.
pub(crate) fn stacked_bars(bars: &[Bar<'_>], description: &str) -> String {
    let row = 44.0;
    let height = TOP + row * bars.len() as f64 + BOTTOM;
    let plot_w = WIDTH - LEFT - RIGHT;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img"><title>{}</title>"#,
        escape(description)
    );
    let mut names: Vec<(&str, &str)> = Vec::new();
    for (i, bar) in bars.iter().enumerate() {
        let y = TOP + row * i as f64 + 8.0;
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" class="label">{}</text>"#,
            LEFT - 6.0,
            y + 18.0,
            escape(bar.label)
        );
        let mut x = LEFT;
        for &(share, name, color) in &bar.segments {
            let w = share.clamp(0.0, 1.0) * plot_w;
            let _ = write!(
                svg,
                r#"<rect class="segment" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="28" fill="{color}"><title>{}: {:.1}%</title></rect>"#,
                escape(name),
                100.0 * share
            );
            if w > 34.0 {
                let _ = write!(
                    svg,
                    r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="tick" fill="#fff">{:.0}%</text>"##,
                    x + w / 2.0,
                    y + 18.0,
                    100.0 * share
                );
            }
            x += w;
            if !names.iter().any(|n| n.0 == name) {
                names.push((name, color));
            }
        }
    }
    let axis_y = TOP + row * bars.len() as f64 + 4.0;
    for k in 0..=4 {
        let x = LEFT + plot_w * k as f64 / 4.0;
        let _ = write!(
            svg,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle" class="tick">{}%</text>"#,
            axis_y + 12.0,
            25 * k
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="label">share of epoch time (%)</text>"#,
        LEFT + plot_w / 2.0,
        height - 8.0
    );
    for (i, (name, color)) in names.iter().enumerate() {
        legend(&mut svg, i, name, color);
    }
    svg.push_str("</svg>");
    svg
}

fn open_svg(description: &str) -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img"><title>{}</title>"#,
        escape(description)
    )
}

fn legend(svg: &mut String, i: usize, name: &str, color: &str) {
    let (x, y) = (WIDTH - RIGHT + 12.0, TOP + 10.0 + 18.0 * i as f64);
    let _ = write!(
        svg,
        r#"<rect x="{x:.1}" y="{:.1}" width="12" height="12" fill="{color}"/><text x="{:.1}" y="{:.1}" class="tick">{}</text>"#,
        y - 10.0,
        x + 16.0,
        y,
        escape(name)
    );
}

/// The range of finite values, (0, 1) when there are none.
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    }
}

/// An axis from `min` to `max`, linear (from a round number to a round number) or
/// logarithmic.
struct Axis {
    min: f64,
    max: f64,
    log: bool,
}

impl Axis {
    fn new(min: f64, max: f64, log: bool) -> Axis {
        if log {
            let min = min.max(f64::MIN_POSITIVE);
            return Axis {
                min,
                max: max.max(min * 1.01),
                log,
            };
        }
        let step = nice_step(min, max);
        Axis {
            min: (min / step).floor() * step,
            max: ((max / step).ceil() * step).max(min + step),
            log,
        }
    }

    /// Where `v` lies on the axis, 0–1.
    fn unit(&self, v: f64) -> f64 {
        if self.log {
            (v.max(self.min).ln() - self.min.ln()) / (self.max.ln() - self.min.ln())
        } else {
            (v - self.min) / (self.max - self.min)
        }
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            // 1, 2, 5 times the powers of ten within range.
            let mut ticks = Vec::new();
            let mut decade = 10f64.powf(self.min.log10().floor());
            while decade <= self.max {
                for m in [1.0, 2.0, 5.0] {
                    let t = decade * m;
                    if t >= self.min * 0.999 && t <= self.max * 1.001 {
                        ticks.push(t);
                    }
                }
                decade *= 10.0;
            }
            return ticks;
        }
        let step = nice_step(self.min, self.max);
        let n = ((self.max - self.min) / step).round() as usize;
        (0..=n).map(|k| self.min + step * k as f64).collect()
    }
}

/// A round step (1, 2 or 5 times a power of ten) giving about five intervals.
fn nice_step(min: f64, max: f64) -> f64 {
    let raw = ((max - min) / 5.0).max(1e-12);
    let power = 10f64.powf(raw.log10().floor());
    let m = raw / power;
    let nice = if m < 1.5 {
        1.0
    } else if m < 3.0 {
        2.0
    } else if m < 7.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// A number as a chart label: at most three significant digits, no trailing zeros.
pub(crate) fn number(v: f64) -> String {
    if !v.is_finite() {
        return "∞".into();
    }
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        trim(format!("{v:.1}"))
    } else if a >= 1.0 {
        trim(format!("{v:.2}"))
    } else {
        trim(format!("{v:.3}"))
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Text made safe for HTML and SVG.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_axes_run_between_round_numbers() {
        let axis = Axis::new(0.0, 1234.0, false);
        assert_eq!((axis.min, axis.max), (0.0, 1400.0));
        assert_eq!(axis.ticks().len(), 8);
        assert_eq!(nice_step(0.0, 1.0), 0.2);
    }

    #[test]
    fn log_axes_tick_at_one_two_five() {
        let axis = Axis::new(3.0, 800.0, true);
        assert_eq!(
            axis.ticks(),
            vec![5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]
        );
        assert!((axis.unit(3.0)).abs() < 1e-12 && (axis.unit(800.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn numbers_and_text_are_printed_for_people_and_browsers() {
        assert_eq!(number(1234.4), "1234");
        assert_eq!(number(12.0), "12");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn a_chart_draws_every_series_and_point() {
        let chart = LineChart {
            title: "prep rate",
            x_label: "threads",
            y_label: "samples/s",
            series: vec![Series {
                name: "P(n)",
                color: "#1f77b4",
                points: vec![(1.0, 100.0), (2.0, 190.0), (3.0, 270.0)],
                dashed_after: Some(2.0),
            }],
            log_x: false,
            marker: Some((2.0, "now")),
            y_max: Some(200.0),
        }
        .svg();
        // The point above the axis lies outside the clipping plot viewport.
        assert!(chart.contains(r#"class="plot""#), "{chart}");
        let above = TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - 270.0 / 200.0);
        assert!(chart.contains(&format!(r#"cy="{above:.1}""#)), "{chart}");
        assert_eq!(
            chart.matches("<polyline").count(),
            2,
            "solid and dashed parts"
        );
        assert_eq!(chart.matches("<circle").count(), 3);
        assert!(chart.starts_with("<svg") && chart.ends_with("</svg>"));
    }
}
