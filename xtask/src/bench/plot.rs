//! The `bench matrix` plot, an SVG drawn with plotters (SVG backend only: no
//! system fonts, the viewer renders the text). One column per rw and queue
//! count; the top row IOPS, the bottom row guest CPU time per I/O, both on
//! log scales; one line per driver over the iodepths, through the medians,
//! with a bar from the smallest to the largest round.

use anyhow::{anyhow, Result};
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;
use std::ops::Range;

use super::matrix::{BlkDriver, Plan, Rw};
use super::matrix_report::CellStats;
use super::stats::Summary;

const WIDTH: u32 = 1600;
const HEIGHT: u32 = 900;

/// The x axis: the iodepths as evenly spaced categories at 0, 1, 2, ...
pub(super) struct DepthAxis {
    pub(super) labels: Vec<String>,
}

impl Ranged for DepthAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let r = self.range();
        let frac = (value - r.start) / (r.end - r.start);
        limit.0 + (f64::from(limit.1 - limit.0) * frac).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // One bold line and label per iodepth, no light grid lines.
        if hint.weight().allow_light_points() || hint.max_num_points() == 0 {
            return Vec::new();
        }
        (0..self.labels.len()).map(|i| i as f64).collect()
    }

    fn range(&self) -> Range<f64> {
        -0.5..self.labels.len() as f64 - 0.5
    }
}

impl ValueFormatter<f64> for DepthAxis {
    fn format_ext(&self, value: &f64) -> String {
        let i = value.round();
        if i >= 0.0 && (i as usize) < self.labels.len() {
            self.labels[i as usize].clone()
        } else {
            String::new()
        }
    }
}

/// A log scale whose grid and labels are 1, 2 and 5 times the powers of
/// ten inside its range (light lines at the other multiples), so that
/// every panel has labels near its values.
pub(super) struct LogAxis {
    pub(super) range: Range<f64>,
    pub(super) format: fn(f64) -> String,
}

impl LogAxis {
    /// Values `m * 10^k` inside the range for the multiples `m`.
    fn ticks(&self, multiples: &[f64]) -> Vec<f64> {
        let (lo, hi) = (self.range.start, self.range.end);
        let mut out = Vec::new();
        let mut decade = 10f64.powf(lo.log10().floor());
        while decade <= hi {
            for m in multiples {
                let v = decade * m;
                if v >= lo && v <= hi {
                    out.push(v);
                }
            }
            decade *= 10.0;
        }
        out
    }
}

impl Ranged for LogAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let (lo, hi) = (self.range.start.ln(), self.range.end.ln());
        let frac = (value.max(f64::MIN_POSITIVE).ln() - lo) / (hi - lo);
        limit.0 + (f64::from(limit.1 - limit.0) * frac).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        let max = hint.max_num_points();
        let candidates: &[&[f64]] = if hint.weight().allow_light_points() {
            &[&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]]
        } else {
            &[&[1.0, 2.0, 5.0], &[1.0]]
        };
        candidates
            .iter()
            .map(|m| self.ticks(m))
            .find(|t| t.len() <= max)
            .unwrap_or_default()
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

impl ValueFormatter<f64> for LogAxis {
    fn format_ext(&self, value: &f64) -> String {
        (self.format)(*value)
    }
}

fn color(d: BlkDriver) -> RGBColor {
    match d {
        BlkDriver::C => RGBColor(31, 119, 180),
        BlkDriver::Rust => RGBColor(230, 97, 0),
        BlkDriver::NullBlk => RGBColor(90, 90, 90),
        BlkDriver::Rnull => RGBColor(44, 160, 44),
    }
}

/// In-kernel drivers (the ceiling) are drawn dashed.
fn dashed(d: BlkDriver) -> bool {
    matches!(d, BlkDriver::NullBlk | BlkDriver::Rnull)
}

/// One line of a panel: a driver's (x, median/min/max) points.
type Line = (BlkDriver, Vec<(f64, Summary)>);

/// What one panel shows.
struct Panel {
    title: String,
    lines: Vec<Line>,
}

/// A log axis range that holds every value, with some room around.
fn y_range<'a>(panels: impl Iterator<Item = &'a Panel>) -> Range<f64> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for p in panels {
        for (_, pts) in &p.lines {
            for (_, s) in pts {
                lo = lo.min(s.min);
                hi = hi.max(s.max);
            }
        }
    }
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0) {
        return 1.0..10.0;
    }
    lo / 1.5..hi * 1.5
}

pub(super) fn fmt_iops(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1000.0 {
        format!("{}K", trim(v / 1000.0))
    } else {
        trim(v)
    }
}

pub(super) fn fmt_us(v: f64) -> String {
    trim(v)
}

/// `2`, `2.5`, `0.25`: no trailing zeros.
pub(super) fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The panels of one row: per (rw, queues), each driver's line from
/// `value` (IOPS or CPU time per I/O).
fn panels(
    stats: &[CellStats],
    plan: &Plan,
    what: &str,
    value: fn(&CellStats) -> Option<Summary>,
) -> Vec<Panel> {
    let n = plan.drivers.len() as f64;
    let mut out = Vec::new();
    for rw in Rw::ALL {
        for &q in &plan.queues {
            let mut lines = Vec::new();
            let mut missing = Vec::new();
            for (di, &d) in plan.drivers.iter().enumerate() {
                // Side by side inside an iodepth, so the bars do not overlap.
                let shift = (di as f64 - (n - 1.0) / 2.0) * 0.07;
                let pts: Vec<(f64, Summary)> = plan
                    .base
                    .iodepths
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &qd)| {
                        let s = stats.iter().find(|s| {
                            s.cell.driver == d
                                && s.cell.rw == rw
                                && s.cell.queues == q
                                && s.cell.iodepth == qd
                        })?;
                        Some((i as f64 + shift, value(s)?))
                    })
                    .collect();
                if pts.is_empty() {
                    missing.push(if q > d.max_queues() {
                        format!("{}: {} queue only", d.label(), d.max_queues())
                    } else {
                        format!("{}: no data", d.label())
                    });
                }
                lines.push((d, pts));
            }
            let queues = if q == 1 { "queue" } else { "queues" };
            let mut title = format!("{}, {q} {queues}: {what}", rw.id());
            if !missing.is_empty() {
                title += &format!(" ({})", missing.join("; "));
            }
            out.push(Panel { title, lines });
        }
    }
    out
}

/// One line of a panel: its colour, whether it is dashed, and its
/// (x, median/min/max) points.
pub(super) struct Series {
    pub(super) color: RGBColor,
    pub(super) dashed: bool,
    pub(super) pts: Vec<(f64, Summary)>,
}

/// A panel's axes: the x categories and their title, the y range, title
/// and labels.
pub(super) struct Axes<'a> {
    pub(super) labels: &'a [String],
    pub(super) x_desc: &'a str,
    pub(super) y: Range<f64>,
    pub(super) y_desc: &'a str,
    pub(super) fmt_y: fn(f64) -> String,
}

/// Draws one panel: a line through the medians of each series, a bar
/// from its smallest to its largest round and a dot at each median.
pub(super) fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    series: &[Series],
    axes: Axes,
) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing the plot: {e}");
    let x = DepthAxis {
        labels: axes.labels.to_vec(),
    };
    let y = LogAxis {
        range: axes.y,
        format: axes.fmt_y,
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x, y)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .label_style(("sans-serif", 14))
        .light_line_style(BLACK.mix(0.04))
        .bold_line_style(BLACK.mix(0.15))
        .draw()
        .map_err(|e| err(&e))?;
    for l in series {
        let style = l.color.stroke_width(2);
        let medians: Vec<(f64, f64)> = l.pts.iter().map(|(x, s)| (*x, s.median)).collect();
        if l.dashed {
            chart
                .draw_series(DashedLineSeries::new(medians.clone(), 8, 5, style))
                .map_err(|e| err(&e))?;
        } else {
            chart
                .draw_series(LineSeries::new(medians.clone(), style))
                .map_err(|e| err(&e))?;
        }
        chart
            .draw_series(
                l.pts
                    .iter()
                    .map(|(x, s)| ErrorBar::new_vertical(*x, s.min, s.median, s.max, style, 8)),
            )
            .map_err(|e| err(&e))?;
        chart
            .draw_series(medians.iter().map(|&p| Circle::new(p, 3, l.color.filled())))
            .map_err(|e| err(&e))?;
    }
    Ok(())
}

/// A matrix panel's lines as series.
fn series(panel: &Panel) -> Vec<Series> {
    panel
        .lines
        .iter()
        .map(|(d, pts)| Series {
            color: color(*d),
            dashed: dashed(*d),
            pts: pts.clone(),
        })
        .collect()
}

/// The legend across the top: a line sample and the name of each driver.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    drivers: &[BlkDriver],
) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing the legend: {e}");
    let mut x = 60;
    for &d in drivers {
        let style = color(d).stroke_width(3);
        let line = [(x, 14), (x + 36, 14)];
        if dashed(d) {
            area.draw(&plotters::element::DashedPathElement::new(
                line, 8, 5, style,
            ))
            .map_err(|e| err(&e))?;
        } else {
            area.draw(&PathElement::new(line, style))
                .map_err(|e| err(&e))?;
        }
        let name = match d {
            BlkDriver::NullBlk | BlkDriver::Rnull => format!("{} (in-kernel ceiling)", d.label()),
            _ => d.label().to_string(),
        };
        area.draw(&Text::new(name.clone(), (x + 44, 6), ("sans-serif", 16)))
            .map_err(|e| err(&e))?;
        x += 60 + 8 * name.len() as i32;
    }
    area.draw(&Text::new(
        "lines: median of the rounds; bars: smallest to largest round".to_string(),
        (x + 20, 6),
        ("sans-serif", 14).into_font().color(&BLACK.mix(0.6)),
    ))
    .map_err(|e| err(&e))?;
    Ok(())
}

/// The SVG text of the plot.
pub fn svg(stats: &[CellStats], plan: &Plan, title: &str) -> Result<String> {
    let mut buf = String::new();
    {
        let err = |e: &dyn std::fmt::Display| anyhow!("drawing the plot: {e}");
        let root = SVGBackend::with_string(&mut buf, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root
            .titled(title, ("sans-serif", 22))
            .map_err(|e| err(&e))?;
        let (legend, grid) = root.split_vertically(34);
        draw_legend(&legend, &plan.drivers)?;
        let labels: Vec<String> = plan.base.iodepths.iter().map(u32::to_string).collect();
        let iops = panels(stats, plan, "IOPS", CellStats::iops_summary);
        let cpu = panels(stats, plan, "CPU per I/O", CellStats::cpu_summary);
        let (y_iops, y_cpu) = (y_range(iops.iter()), y_range(cpu.iter()));
        let areas = grid.split_evenly((2, iops.len()));
        for (i, p) in iops.iter().enumerate() {
            let axes = Axes {
                labels: &labels,
                x_desc: "iodepth (per fio job)",
                y: y_iops.clone(),
                y_desc: "IOPS (log)",
                fmt_y: fmt_iops,
            };
            draw_panel(&areas[i], &p.title, &series(p), axes)?;
        }
        for (i, p) in cpu.iter().enumerate() {
            let axes = Axes {
                labels: &labels,
                x_desc: "iodepth (per fio job)",
                y: y_cpu.clone(),
                y_desc: "guest CPU µs per I/O (log)",
                fmt_y: fmt_us,
            };
            draw_panel(&areas[iops.len() + i], &p.title, &series(p), axes)?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::super::matrix_report::collect;
    use super::super::samples::parse_csv;
    use super::*;

    #[test]
    fn axis() {
        let x = DepthAxis {
            labels: vec!["1".into(), "16".into(), "128".into()],
        };
        assert_eq!(x.range(), -0.5..2.5);
        assert_eq!(x.map(&-0.5, (0, 300)), 0);
        assert_eq!(x.map(&1.0, (0, 300)), 150);
        assert_eq!(
            x.key_points(plotters::coord::ranged1d::BoldPoints(10)),
            [0.0, 1.0, 2.0]
        );
        assert!(x.key_points(10usize).is_empty());
        assert_eq!(x.format_ext(&2.0), "128");
        assert_eq!(x.format_ext(&7.0), "");
        assert_eq!(fmt_iops(25000.0), "25K");
        assert_eq!(fmt_iops(2500.0), "2.5K");
        assert_eq!(fmt_iops(300.0), "300");
        assert_eq!(fmt_iops(1e6), "1M");
        assert_eq!(fmt_us(0.25), "0.25");
        let y = LogAxis {
            range: 3000.0..250_000.0,
            format: fmt_iops,
        };
        let bold = plotters::coord::ranged1d::BoldPoints(20);
        assert_eq!(y.key_points(bold), [5e3, 1e4, 2e4, 5e4, 1e5, 2e5]);
        assert_eq!(
            y.key_points(plotters::coord::ranged1d::BoldPoints(3)),
            [1e4, 1e5]
        );
        assert_eq!(y.key_points(100usize).len(), 7 + 9 + 2);
        assert_eq!(y.map(&3000.0, (500, 0)), 500);
        assert_eq!(y.map(&250_000.0, (500, 0)), 0);
        assert_eq!(y.format_ext(&20000.0), "20K");
    }

    #[test]
    fn draws_every_driver() {
        let plan = Plan::new(&BlkDriver::ALL, &[1, 16, 128], &[1, 2], 2, 4).unwrap();
        let mut csv = String::from("matrix,clk_tck,0,100\n");
        for (i, c) in plan.cells.iter().enumerate() {
            for r in 1..=2 {
                let k = c.key();
                csv += &format!("matrix,{k}/iops,{r},{}\n", 1000 * (i + r as usize));
                csv += &format!("matrix,{k}/busy_ticks,{r},{}\n", 100 + i);
                csv += &format!("matrix,{k}/ios,{r},{}\n", 20000 + 100 * r);
            }
        }
        let stats = collect(&parse_csv(&csv), &plan, &[]);
        let svg = svg(&stats, &plan, "test matrix").unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
        for text in [
            "test matrix",
            "C ublk",
            "Rust ublk",
            "null_blk (in-kernel ceiling)",
            "rnull (in-kernel ceiling)",
            "randread, 1 queue: IOPS",
            "randwrite, 2 queues: CPU per I/O",
            "iodepth (per fio job)",
            "\n128\n",
            "randread, 2 queues: IOPS (rnull: 1 queue only)",
        ] {
            assert!(svg.contains(text), "no {text:?} in the SVG");
        }
        // Also with nothing measured (a run where every driver failed).
        let empty = collect(&parse_csv(""), &plan, &[]);
        assert!(svg_ok(&empty, &plan));
    }

    fn svg_ok(stats: &[CellStats], plan: &Plan) -> bool {
        svg(stats, plan, "empty").is_ok()
    }
}
