//! Output: the losses as CSV and as a PNG plot (no text: plotters' bitmap backend would need
//! system fonts).

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::Res;
use crate::model::Point;

/// A fresh folder `name-<pid>` under the system's temporary folder.
pub(crate) fn tempfile_dir(name: &str) -> Res<PathBuf> {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// The four loss curves, one row a step.
pub(crate) fn write_csv(path: &Path, z1: &[Point], z42: &[Point], n1: &[Point], n42: &[Point]) -> Res<()> {
    let mut s = String::from("step,zephon_w1,zephon_w4_w2,naive_w1,naive_w4_w2\n");
    for i in 0..z1.len() {
        s.push_str(&format!("{i},{},{},{},{}\n", z1[i].loss, z42[i].loss, n1[i].loss, n42[i].loss));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, s)?;
    Ok(())
}

/// Curves in order: zephon W=1 (blue), zephon W=4->2 (orange, thin, on top of it), naive W=1
/// (grey), naive W=4->2 (red); a dashed vertical line at the resume step; light grid lines
/// every 50 steps and every 1.0 of loss.
pub(crate) fn plot(path: &Path, curves: &[&[Point]], resume: usize) -> Res<()> {
    const W: u32 = 1000;
    const H: u32 = 600;
    let mut pixels = vec![255u8; (W * H * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, (W, H)).into_drawing_area();
        root.fill(&WHITE)?;
        let n = curves[0].len();
        let losses = curves.iter().flat_map(|c| c.iter().map(|p| p.loss));
        let (lo, hi) = losses.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
        let (lo, hi) = (lo.floor(), hi.ceil());
        let area = root.margin(20, 20, 20, 20);
        let mut chart = ChartBuilder::on(&area).build_cartesian_2d(0f64..(n - 1) as f64, lo..hi)?;
        let grey = RGBColor(225, 225, 225);
        for x in (0..n).step_by(50) {
            chart.draw_series(LineSeries::new([(x as f64, lo), (x as f64, hi)], grey.stroke_width(1)))?;
        }
        for y in (lo as i64)..=(hi as i64) {
            chart.draw_series(LineSeries::new([(0.0, y as f64), ((n - 1) as f64, y as f64)], grey.stroke_width(1)))?;
        }
        chart.draw_series(DashedLineSeries::new(
            [(resume as f64, lo), (resume as f64, hi)],
            6,
            4,
            BLACK.stroke_width(1),
        ))?;
        let styles = [
            RGBColor(31, 119, 180).stroke_width(5),
            RGBColor(255, 127, 14).stroke_width(2),
            RGBColor(150, 150, 150).stroke_width(2),
            RGBColor(214, 39, 40).stroke_width(2),
        ];
        for (c, style) in curves.iter().zip(styles) {
            chart.draw_series(LineSeries::new(c.iter().enumerate().map(|(i, p)| (i as f64, p.loss)), style))?;
        }
        root.present()?;
    }
    write_png(path, W, H, &pixels)
}

/// Writes RGB8 pixels as a PNG (the `png` crate, already built for the image pipeline).
fn write_png(path: &Path, w: u32, h: u32, rgb: &[u8]) -> Res<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut encoder = png::Encoder::new(std::io::BufWriter::new(std::fs::File::create(path)?), w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.write_header()?.write_image_data(rgb)?;
    Ok(())
}
