//! `strata eval --targets … --svg FILE`: the cost/recall curve as a picture — the policy at each
//! target beside the baselines scored in the same runs (newest-message truncation at the same
//! sizes, last-N observation masking, transcript replay), so that a reader sees at a glance
//! whether the policy's curve lies above the baselines' at equal size.

use std::fmt::Write;

use strata_eval::{SideTotals, Totals};

/// One point of a series: percent fewer tokens than transcript replay, percent recall.
type Point = (f64, f64);

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 260.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 50.0;

/// The SVG of the curve: one row per target (`None`: the policy's own sizes, first), each an
/// evaluation's totals; `policy` names the policy, `last_n` the masking baseline.
pub(crate) fn render(rows: &[(Option<u64>, &Totals)], policy: &str, last_n: usize) -> String {
    let point = |t: &Totals, side: &SideTotals| (100.0 * t.reduction(side), 100.0 * t.recall(side));
    let mut by_target: Vec<(u64, &Totals)> = rows
        .iter()
        .filter_map(|(target, t)| target.map(|n| (n, *t)))
        .collect();
    by_target.sort_by_key(|(n, _)| *n);
    let policy_curve: Vec<Point> = by_target.iter().map(|(_, t)| point(t, &t.strata)).collect();
    let truncation: Vec<Point> = by_target
        .iter()
        .map(|(_, t)| point(t, &t.truncated))
        .collect();
    let Some((_, first)) = rows.first() else {
        return String::new();
    };
    let masking = point(first, &first.last_n);
    let own = rows
        .iter()
        .find(|(target, _)| target.is_none())
        .map(|(_, t)| point(t, &t.strata));
    // Transcript replay (0% fewer, all the evidence) is named in the legend, not plotted: it
    // would squash the curves into a corner.
    let all: Vec<Point> = policy_curve
        .iter()
        .chain(&truncation)
        .copied()
        .chain([masking])
        .chain(own)
        .collect();
    let frame = Frame::around(&all);

    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    svg.push_str(&frame.axes());
    svg.push_str(&series(
        &frame,
        &truncation,
        "#9aa3b2",
        "newest-message truncation",
    ));
    svg.push_str(&series(&frame, &policy_curve, "#d3582f", policy));
    let mut legend_row = 2;
    for (p, colour, label) in [
        (Some(masking), "#2f5bd3", format!("last-{last_n} masking")),
        (own, "#8a4fc4", format!("{policy}, its own target")),
    ] {
        if let Some(p) = p {
            let (x, y) = frame.at(p);
            let _ = write!(
                svg,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="5" fill="{colour}"/>"#
            );
            svg.push_str(&legend(legend_row, colour, &label));
            legend_row += 1;
        }
    }
    svg.push_str(&legend(0, "#d3582f", &format!("{policy} at each target")));
    svg.push_str(&legend(1, "#9aa3b2", "newest-message truncation"));
    svg.push_str(&legend(
        legend_row,
        "#2f9e6b",
        "transcript replay: 0% fewer, 100%",
    ));
    svg.push_str("</svg>\n");
    svg
}

/// The plotted range: from the points' extremes, rounded out to 5 points.
struct Frame {
    x: (f64, f64),
    y: (f64, f64),
}

impl Frame {
    fn around(points: &[Point]) -> Self {
        let lo = |f: fn(&Point) -> f64| points.iter().map(f).fold(f64::MAX, f64::min);
        let hi = |f: fn(&Point) -> f64| points.iter().map(f).fold(f64::MIN, f64::max);
        let out = |a: f64, b: f64| {
            (
                (a / 5.0).floor() * 5.0,
                ((b / 5.0).ceil() * 5.0).max(a + 5.0),
            )
        };
        Self {
            x: out(lo(|p| p.0), hi(|p| p.0)),
            y: out(lo(|p| p.1), hi(|p| p.1).min(100.0)),
        }
    }

    fn at(&self, (x, y): Point) -> (f64, f64) {
        let plot_w = WIDTH - LEFT - RIGHT;
        let plot_h = HEIGHT - TOP - BOTTOM;
        (
            LEFT + (x - self.x.0) / (self.x.1 - self.x.0) * plot_w,
            TOP + (self.y.1 - y) / (self.y.1 - self.y.0) * plot_h,
        )
    }

    fn axes(&self) -> String {
        let mut out = String::new();
        let (x0, y0) = self.at((self.x.0, self.y.0));
        let (x1, y1) = self.at((self.x.1, self.y.1));
        let _ = write!(
            out,
            "<path d=\"M{x0:.1},{y1:.1} V{y0:.1} H{x1:.1}\" fill=\"none\" stroke=\"#333\"/>"
        );
        for tick in ticks(self.x) {
            let (x, _) = self.at((tick, self.y.0));
            let _ = write!(
                out,
                r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{tick:.0}%</text>"#,
                y0 + 18.0
            );
        }
        for tick in ticks(self.y) {
            let (_, y) = self.at((self.x.0, tick));
            let _ = write!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{tick:.0}%</text>"#,
                x0 - 6.0,
                y + 4.0
            );
        }
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">fewer tokens than transcript replay</text><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">evidence recall</text>"#,
            (x0 + x1) / 2.0,
            HEIGHT - 10.0,
            (y0 + y1) / 2.0,
            (y0 + y1) / 2.0
        );
        out
    }
}

/// Ticks every 5 points within `range`, every 10 over a wide one.
fn ticks(range: (f64, f64)) -> impl Iterator<Item = f64> {
    let step = if range.1 - range.0 > 40.0 { 10.0 } else { 5.0 };
    let steps = ((range.1 - range.0) / step).floor() as usize;
    (0..=steps).map(move |i| range.0 + step * i as f64)
}

fn series(frame: &Frame, points: &[Point], colour: &str, label: &str) -> String {
    if points.is_empty() {
        return String::new();
    }
    let path: Vec<String> = points
        .iter()
        .map(|&p| {
            let (x, y) = frame.at(p);
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let mut out = format!(
        r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"><title>{}</title></polyline>"#,
        path.join(" "),
        escape(label)
    );
    for &p in points {
        let (x, y) = frame.at(p);
        let _ = write!(
            out,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{colour}"><title>{:.1}% fewer, {:.1}% recall</title></circle>"#,
            p.0, p.1
        );
    }
    out
}

fn legend(row: usize, colour: &str, label: &str) -> String {
    let x = WIDTH - RIGHT + 12.0;
    let y = TOP + 10.0 + 20.0 * row as f64;
    format!(
        r#"<rect x="{x:.1}" y="{:.1}" width="10" height="10" fill="{colour}"/><text x="{:.1}" y="{y:.1}">{}</text>"#,
        y - 9.0,
        x + 16.0,
        escape(label)
    )
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(strata: u64, truncated: u64) -> Totals {
        let mut t = Totals {
            points: 1,
            evidence: 100,
            ..Totals::default()
        };
        t.transcript.tokens = 1_000;
        t.transcript.present = 100;
        t.strata.tokens = strata;
        t.strata.present = 90;
        t.truncated.tokens = strata;
        t.truncated.present = truncated;
        t.last_n.tokens = 400;
        t.last_n.present = 88;
        t
    }

    #[test]
    fn every_target_and_baseline_is_drawn_with_its_figures() {
        let (own, small, large) = (totals(350, 80), totals(300, 75), totals(500, 85));
        let rows = [(None, &own), (Some(8_000), &small), (Some(12_000), &large)];
        let svg = render(&rows, "strata.assembly/12", 5);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // The policy at both targets, truncation at the same sizes.
        assert!(svg.contains("70.0% fewer, 90.0% recall"), "{svg}");
        assert!(svg.contains("50.0% fewer, 90.0% recall"), "{svg}");
        assert!(svg.contains("70.0% fewer, 75.0% recall"), "{svg}");
        assert!(svg.contains("last-5 masking"));
        assert!(svg.contains("transcript replay: 0% fewer"));
        assert_eq!(svg.matches("<polyline").count(), 2);
    }
}
