//! Figures as the workloads print them: percentiles, milliseconds and a
//! progress bar.

use std::time::Duration;

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

pub(crate) fn summary(mut v: Vec<Duration>) -> (usize, Duration, Duration) {
    v.sort();
    (v.len(), percentile(&v, 50.0), percentile(&v, 99.0))
}

/// A bar on a terminal; nothing otherwise, so CI keeps its plain lines.
pub(crate) fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    let template = format!("{{elapsed_precise}} {{wide_bar}} {{pos}}/{{len}} {what}");
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}
