//! The SVG plot of a `quantkit qat` run: training loss per epoch (left) and the evaluation
//! metric per epoch for the float model, the fake-quant model in exact mode and the integer
//! engine (right). Written beside the CSV log.

use anyhow::{anyhow, Result};

/// One epoch of the log. The evaluation values are `None` for epochs that were not
/// evaluated (`--eval-last`).
#[derive(Debug, Clone, Copy)]
pub struct EpochPoint {
    pub epoch: usize,
    pub loss: f64,
    pub float: Option<f64>,
    pub fake: Option<f64>,
    pub engine: Option<f64>,
}

/// The plot's path for a CSV log: the same path with the extension `svg`.
pub fn plot_path(log: &std::path::Path) -> std::path::PathBuf {
    log.with_extension("svg")
}

/// Renders the plot to a string (nothing touches the disk until it is complete).
/// `metric` names the right panel's values ("accuracy", "agreement with float",
/// "reconstruction MSE"); accuracy-like metrics in [0, 1] are drawn in percent.
pub fn render(points: &[EpochPoint], metric: &str, percent: bool) -> Result<String> {
    use plotters::prelude::*;
    let e = |e: &dyn std::fmt::Display| anyhow!("drawing the qat plot: {e}");
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let (left, right) = root.split_horizontally(480);
        let last = points.iter().map(|p| p.epoch).max().unwrap_or(1).max(1) as f64;
        let xr = 0.5..last + 0.5;
        let span = |v: &mut dyn Iterator<Item = f64>| {
            let (lo, hi) = v
                .filter(|t| t.is_finite())
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), t| {
                    (a.min(t), b.max(t))
                });
            if !lo.is_finite() {
                return 0.0..1.0;
            }
            let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.01).max(1e-9);
            (lo - pad)..(hi + pad)
        };

        let mut c = ChartBuilder::on(&left)
            .caption("training loss", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(64)
            .build_cartesian_2d(xr.clone(), span(&mut points.iter().map(|p| p.loss)))
            .map_err(|x| e(&x))?;
        c.configure_mesh()
            .x_desc("epoch")
            .x_labels(points.len().clamp(2, 12))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()
            .map_err(|x| e(&x))?;
        let loss: Vec<(f64, f64)> = points.iter().map(|p| (p.epoch as f64, p.loss)).collect();
        c.draw_series(LineSeries::new(loss.clone(), &BLACK))
            .map_err(|x| e(&x))?;
        c.draw_series(loss.iter().map(|&p| Circle::new(p, 3, BLACK.filled())))
            .map_err(|x| e(&x))?;

        let scale = if percent { 100.0 } else { 1.0 };
        type Get = fn(&EpochPoint) -> Option<f64>;
        let series: [(&str, RGBColor, Get); 3] = [
            ("float", BLUE, |p| p.float),
            ("fake-quant (exact mode)", RED, |p| p.fake),
            ("integer engine", GREEN, |p| p.engine),
        ];
        let values: Vec<Vec<(f64, f64)>> = series
            .iter()
            .map(|(_, _, get)| {
                points
                    .iter()
                    .filter_map(|p| get(p).map(|v| (p.epoch as f64, v * scale)))
                    .collect()
            })
            .collect();
        let caption = if percent {
            format!("{metric} (%)")
        } else {
            metric.to_string()
        };
        let mut c = ChartBuilder::on(&right)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(64)
            .build_cartesian_2d(xr, span(&mut values.iter().flatten().map(|p| p.1)))
            .map_err(|x| e(&x))?;
        c.configure_mesh()
            .x_desc("epoch")
            .x_labels(points.len().clamp(2, 12))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .draw()
            .map_err(|x| e(&x))?;
        for ((name, color, _), v) in series.iter().zip(&values) {
            let color = *color;
            c.draw_series(LineSeries::new(v.clone(), color))
                .map_err(|x| e(&x))?
                .label(*name)
                .legend(move |(a, b)| PathElement::new(vec![(a, b), (a + 18, b)], color));
            // The engine's hollow, wider markers stay visible on top of exact mode's,
            // which they equal by construction.
            let style = if *name == "integer engine" {
                (6, color.stroke_width(2))
            } else {
                (3, color.filled())
            };
            c.draw_series(v.iter().map(|&p| Circle::new(p, style.0, style.1)))
                .map_err(|x| e(&x))?;
        }
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        root.present().map_err(|x| e(&x))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plot_has_a_marker_per_point_and_a_legend_entry_per_model() {
        let points: Vec<EpochPoint> = (1..=3)
            .map(|i| EpochPoint {
                epoch: i,
                loss: 1.0 / i as f64,
                // --eval-last: only the last epoch is evaluated.
                float: (i == 3).then_some(0.9),
                fake: (i == 3).then_some(0.88),
                engine: (i == 3).then_some(0.88),
            })
            .collect();
        let svg = render(&points, "accuracy", true).unwrap();
        // 3 loss markers + 1 marker for each of the 3 evaluated series.
        assert_eq!(svg.matches("<circle").count(), 6, "{svg}");
        for name in [
            "float",
            "fake-quant (exact mode)",
            "integer engine",
            "training loss",
        ] {
            assert!(svg.contains(name), "{name} missing");
        }
        assert_eq!(
            plot_path(std::path::Path::new("out/m.csv")),
            std::path::PathBuf::from("out/m.svg")
        );
    }
}
