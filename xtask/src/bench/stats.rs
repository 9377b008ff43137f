//! Statistics of the benchmark samples: order statistics, the summary of
//! a cell's per-round values, per-round ratios of two cells and the summary
//! of such ratios over cells.

use std::collections::BTreeMap;

/// The median (mean of the middle two for an even count); NaN if empty.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The nearest-rank percentile `p` (0-100); NaN if empty.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[idx.min(v.len() - 1)]
}

/// The smallest and the largest value, if any.
pub fn spread(v: &[f64]) -> Option<(f64, f64)> {
    let min = v.iter().copied().reduce(f64::min)?;
    let max = v.iter().copied().reduce(f64::max)?;
    Some((min, max))
}

/// Median, smallest and largest of a cell's per-round values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Summary {
    pub fn of<'a>(values: impl IntoIterator<Item = &'a f64>) -> Option<Summary> {
        let mut v: Vec<f64> = values.into_iter().copied().collect();
        let (min, max) = spread(&v)?;
        let n = v.len();
        Some(Summary {
            median: median(&mut v),
            min,
            max,
            n,
        })
    }
}

/// The per-round ratios `other / base`, over the rounds both have and
/// `base` is positive, in round order.
pub fn round_ratios(base: &BTreeMap<u32, f64>, other: &BTreeMap<u32, f64>) -> Vec<f64> {
    base.iter()
        .filter(|(_, &b)| b > 0.0)
        .filter_map(|(r, &b)| Some(other.get(r)? / b))
        .collect()
}

/// A ratio as the tables write it, rounded to two decimals: `1.00x`.
pub fn times(v: f64) -> String {
    format!("{v:.2}x")
}

/// Cells' ratios (each the median of a cell's per-round ratios) over the
/// cells: their median, and how many are at most and at least 1.00x as
/// [`times`] writes them (1.004 counts as 1.00x).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OverCells {
    pub median: f64,
    pub at_most_one: usize,
    pub at_least_one: usize,
    pub n: usize,
}

impl OverCells {
    pub fn of(cell_ratios: &[f64]) -> Option<OverCells> {
        if cell_ratios.is_empty() {
            return None;
        }
        let hundredths = |v: f64| (v * 100.0).round();
        Some(OverCells {
            median: median(&mut cell_ratios.to_vec()),
            at_most_one: cell_ratios
                .iter()
                .filter(|&&v| hundredths(v) <= 100.0)
                .count(),
            at_least_one: cell_ratios
                .iter()
                .filter(|&&v| hundredths(v) >= 100.0)
                .count(),
            n: cell_ratios.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&mut []).is_nan());
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&mut v, 50.0), 51.0);
        assert_eq!(percentile(&mut v, 99.0), 99.0);
        assert_eq!(spread(&[1.1, 0.9, 1.0]), Some((0.9, 1.1)));
        assert_eq!(spread(&[]), None);
    }

    #[test]
    fn summaries() {
        assert_eq!(
            Summary::of(&[3.0, 1.0, 2.0, 10.0]),
            Some(Summary {
                median: 2.5,
                min: 1.0,
                max: 10.0,
                n: 4
            })
        );
        assert_eq!(Summary::of(&[]), None);
    }

    #[test]
    fn ratios_of_rounds() {
        let c = BTreeMap::from([(1, 100.0), (2, 200.0), (3, 0.0), (4, 50.0)]);
        let rust = BTreeMap::from([(1, 90.0), (2, 250.0), (3, 10.0), (5, 1.0)]);
        // round 3: C is 0; rounds 4 and 5: one side only
        assert_eq!(round_ratios(&c, &rust), [0.9, 1.25]);
        assert!(round_ratios(&rust, &BTreeMap::new()).is_empty());
        assert_eq!(times(0.996), "1.00x");
    }

    #[test]
    fn over_cells() {
        let o = OverCells::of(&[1.2, 0.9, 1.004, 0.996, 1.1]).unwrap();
        assert_eq!(o.median, 1.004);
        assert_eq!((o.at_most_one, o.at_least_one, o.n), (3, 4, 5));
        let o = OverCells::of(&[0.8, 1.3]).unwrap();
        assert!((o.median - 1.05).abs() < 1e-9);
        assert_eq!((o.at_most_one, o.at_least_one), (1, 1));
        assert_eq!(OverCells::of(&[]), None);
    }
}
