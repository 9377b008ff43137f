//! The `bench affinity` plot, an SVG drawn with plotters like the matrix's
//! (its axes, `plot`). One column per rq_affinity of the main table: IOPS
//! on top, CPU time per I/O below (the server's CPU solid, all CPUs
//! dashed), flag off and on over the iodepths. The last column is the
//! cost sweep: IOPS off and on over the server's cost per I/O, and below
//! the per-round on/off IOPS ratio. Lines through the medians, bars from
//! the smallest to the largest round.

use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::ops::Range;

use super::affinity::{Cell, Plan};
use super::affinity_report::{ratio, Pick, Stats};
use super::plot::{draw_panel, fmt_iops, fmt_us, trim, Axes, Series};
use super::stats::Summary;

const WIDTH: u32 = 1600;
const HEIGHT: u32 = 900;
const OFF: RGBColor = RGBColor(31, 119, 180);
const ON: RGBColor = RGBColor(230, 97, 0);
const RATIO: RGBColor = RGBColor(44, 160, 44);

struct Panel {
    title: String,
    x_desc: &'static str,
    labels: Vec<String>,
    lines: Vec<Series>,
}

fn y_range(panels: &[&Panel], with_one: bool) -> Range<f64> {
    let mut lo = if with_one { 1.0 } else { f64::INFINITY };
    let mut hi = if with_one { 1.0 } else { f64::NEG_INFINITY };
    for p in panels {
        for l in &p.lines {
            for (_, s) in &l.pts {
                lo = lo.min(s.min);
                hi = hi.max(s.max);
            }
        }
    }
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0) {
        return 1.0..10.0;
    }
    lo / 1.3..hi * 1.3
}

fn axes<'a>(p: &'a Panel, y: Range<f64>, y_desc: &'a str, fmt_y: fn(f64) -> String) -> Axes<'a> {
    Axes {
        labels: &p.labels,
        x_desc: p.x_desc,
        y,
        y_desc,
        fmt_y,
    }
}

/// A line over `cells` (x = their index), shifted by `shift`.
fn line(stats: &Stats, cells: &[Cell], pick: Pick, color: RGBColor, dashed: bool) -> Series {
    let shift = if color == OFF { -0.06 } else { 0.06 };
    let pts = cells
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((i as f64 + shift, Summary::of(pick(stats.get(c)?).values())?)))
        .collect();
    Series { color, dashed, pts }
}

fn off_on(stats: &Stats, cells: &[Cell], pick: Pick, dashed: bool) -> [Series; 2] {
    let on: Vec<Cell> = cells.iter().map(|c| c.with_flag(true)).collect();
    [
        line(stats, cells, pick, OFF, dashed),
        line(stats, &on, pick, ON, dashed),
    ]
}

fn cost_label(ns: u32) -> String {
    format!("{} us", trim(f64::from(ns) / 1000.0))
}

fn draw_legend<DB: DrawingBackend>(area: &DrawingArea<DB, plotters::coord::Shift>) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing the legend: {e}");
    let mut x = 60;
    for (name, color, dashed) in [
        ("flag off", OFF, false),
        ("flag on (UBLK_F_SUPPORT_RQ_AFFINITY)", ON, false),
        (
            "CPU: server's CPU solid, all CPUs dashed",
            RGBColor(110, 110, 110),
            true,
        ),
        ("on/off IOPS ratio", RATIO, false),
    ] {
        let style = color.stroke_width(3);
        let seg = [(x, 14), (x + 36, 14)];
        if dashed {
            area.draw(&plotters::element::DashedPathElement::new(seg, 8, 5, style))
                .map_err(|e| err(&e))?;
        } else {
            area.draw(&PathElement::new(seg, style))
                .map_err(|e| err(&e))?;
        }
        area.draw(&Text::new(
            name.to_string(),
            (x + 44, 6),
            ("sans-serif", 15),
        ))
        .map_err(|e| err(&e))?;
        x += 60 + 8 * name.len() as i32;
    }
    Ok(())
}

/// The SVG text of the plot.
pub fn svg(stats: &Stats, plan: &Plan, title: &str) -> Result<String> {
    let qd_labels: Vec<String> = plan.base.iodepths.iter().map(u32::to_string).collect();
    let mut top = Vec::new();
    let mut bottom = Vec::new();
    for &rqa in &plan.rqas {
        let cells: Vec<Cell> = plan
            .base
            .iodepths
            .iter()
            .map(|&qd| plan.main_cell(qd, rqa))
            .collect();
        top.push(Panel {
            title: format!(
                "rq_affinity {rqa}, server cost {}: IOPS",
                cost_label(plan.cost_ns)
            ),
            x_desc: "iodepth (per fio job)",
            labels: qd_labels.clone(),
            lines: off_on(stats, &cells, |s| &s.iops, false).into(),
        });
        let mut lines: Vec<Series> = off_on(stats, &cells, |s| &s.server_us, false).into();
        lines.extend(off_on(stats, &cells, |s| &s.total_us, true));
        bottom.push(Panel {
            title: format!("rq_affinity {rqa}: CPU per I/O"),
            x_desc: "iodepth (per fio job)",
            labels: qd_labels.clone(),
            lines,
        });
    }
    let sweep: Vec<Cell> = plan
        .sweep_ns
        .iter()
        .map(|&cost_ns| plan.sweep_cell(cost_ns))
        .collect();
    let cost_labels: Vec<String> = plan.sweep_ns.iter().map(|&c| cost_label(c)).collect();
    let sweep_iops = Panel {
        title: format!(
            "sweep, rq_affinity {}, iodepth {}: IOPS",
            plan.sweep_rqa, plan.sweep_iodepth
        ),
        x_desc: "server CPU cost per I/O",
        labels: cost_labels.clone(),
        lines: off_on(stats, &sweep, |s| &s.iops, false).into(),
    };
    let ratios = Panel {
        title: "sweep: IOPS on/off (per round)".to_string(),
        x_desc: "server CPU cost per I/O",
        labels: cost_labels,
        lines: vec![Series {
            color: RATIO,
            dashed: false,
            pts: sweep
                .iter()
                .enumerate()
                .filter_map(|(i, c)| Some((i as f64, ratio(stats, *c, |s| &s.iops)?)))
                .collect(),
        }],
    };
    let mut buf = String::new();
    {
        let err = |e: &dyn std::fmt::Display| anyhow!("drawing the plot: {e}");
        let root = SVGBackend::with_string(&mut buf, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root
            .titled(title, ("sans-serif", 20))
            .map_err(|e| err(&e))?;
        let (legend, grid) = root.split_vertically(34);
        draw_legend(&legend)?;
        let cols = top.len() + 1;
        let areas = grid.split_evenly((2, cols));
        let mut iops_panels: Vec<&Panel> = top.iter().collect();
        iops_panels.push(&sweep_iops);
        let y_iops = y_range(&iops_panels, false);
        let y_cpu = y_range(&bottom.iter().collect::<Vec<_>>(), false);
        for (i, p) in iops_panels.iter().enumerate() {
            let a = axes(p, y_iops.clone(), "IOPS (log)", fmt_iops);
            draw_panel(&areas[i], &p.title, &p.lines, a)?;
        }
        for (i, p) in bottom.iter().enumerate() {
            let a = axes(p, y_cpu.clone(), "CPU µs per I/O (log)", fmt_us);
            draw_panel(&areas[cols + i], &p.title, &p.lines, a)?;
        }
        let a = axes(&ratios, y_range(&[&ratios], true), "on/off (log)", fmt_us);
        draw_panel(&areas[2 * cols - 1], &ratios.title, &ratios.lines, a)?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::super::affinity::tests::opts;
    use super::super::affinity_report::collect;
    use super::super::samples::parse_csv;
    use super::*;

    #[test]
    fn draws() {
        let plan = Plan::new(&opts(&["--rounds", "2"])).unwrap();
        let mut csv = String::from("rqa,clk_tck,0,100\n");
        for c in &plan.cells {
            for r in 1..=2 {
                let k = c.key();
                csv += &format!("rqa,{k}/iops,{r},{}\n", 10_000 + 100 * r);
                csv += &format!("rqa,{k}/busy_ticks,{r},200\nrqa,{k}/server_ticks,{r},100\n");
                csv += &format!("rqa,{k}/ios,{r},20000\n");
            }
        }
        let svg = svg(&collect(&parse_csv(&csv), &plan), &plan, "test affinity").unwrap();
        for text in [
            "test affinity",
            "flag on (UBLK_F_SUPPORT_RQ_AFFINITY)",
            "rq_affinity 2, server cost 20 us: IOPS",
            "rq_affinity 0: CPU per I/O",
            "sweep, rq_affinity 2, iodepth 96: IOPS",
            "sweep: IOPS on/off (per round)",
            "40 us",
        ] {
            assert!(svg.contains(text), "no {text:?} in the SVG");
        }
        assert!(svg_ok(&plan));
    }

    fn svg_ok(plan: &Plan) -> bool {
        svg(&Stats::new(), plan, "empty").is_ok()
    }
}
