//! Robust statistics for small samples of delays and arrival times.
//!
//! Why robust: retry delays measured at the server carry scheduling noise and the odd outlier (a
//! request stuck behind a slow one). The median and the median absolute deviation (MAD) or the
//! interquartile range, and quantiles generally, ignore a few outliers where a mean and a standard deviation would not.

/// Quantile `q` in [0, 1] of an ascending sample, linearly interpolated; `None` when empty.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let q = q.clamp(0.0, 1.0);
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let (a, b) = (sorted.get(lo)?, sorted.get(hi)?);
    Some(a + (b - a) * (pos - lo as f64))
}

/// The largest number of ascending `times` inside any window `[t, t + width)`, and where it starts.
pub(crate) fn densest_window(times: &[u64], width: u64) -> (usize, usize) {
    let mut best = (0, 0);
    let mut lo = 0;
    for (hi, &t) in times.iter().enumerate() {
        while times.get(lo).is_some_and(|&s| s.saturating_add(width) <= t) {
            lo += 1;
        }
        let n = hi + 1 - lo;
        if n > best.0 {
            best = (n, lo);
        }
    }
    best
}

/// Peak-to-mean ratio of `times` binned in windows of `width` from `start` to the last time.
pub(crate) fn peak_to_mean(times: &[u64], start: u64, width: u64) -> Option<f64> {
    let last = *times.iter().max()?;
    let width = width.max(1);
    let bins = (last.saturating_sub(start) / width + 1) as usize;
    let mut counts = vec![0u64; bins];
    for &t in times {
        let i = (t.saturating_sub(start) / width) as usize;
        if let Some(c) = counts.get_mut(i) {
            *c += 1;
        }
    }
    let peak = *counts.iter().max()? as f64;
    let mean = times.len() as f64 / bins as f64;
    (mean > 0.0).then_some(peak / mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let s = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&s, 0.5), Some(2.5));
        assert_eq!(quantile(&s, 0.0), Some(1.0));
        assert_eq!(quantile(&s, 1.0), Some(4.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn densest_window_counts_half_open_windows() {
        let t = [0, 10, 20, 100, 101, 102, 103];
        assert_eq!(densest_window(&t, 10), (4, 3));
        assert_eq!(densest_window(&t, 21), (4, 3));
        assert_eq!(densest_window(&[], 10), (0, 0));
    }

    #[test]
    fn peak_to_mean_of_one_burst() {
        // 4 arrivals at t=0 and nothing else for 3 more windows: peak 4, mean 1.
        assert_eq!(peak_to_mean(&[0, 0, 0, 0, 35], 0, 10), Some(4.0 / 1.25));
    }
}
