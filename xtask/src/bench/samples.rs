//! The guest's samples: `bench.csv`, one `section,config,round,value` line
//! per measurement.

use std::collections::BTreeMap;

/// section → config → round → values
pub type Samples = BTreeMap<String, BTreeMap<String, BTreeMap<u32, Vec<f64>>>>;

pub fn parse_csv(text: &str) -> Samples {
    let mut s = Samples::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 4 {
            continue;
        }
        let (Ok(round), Ok(v)) = (f[2].parse::<u32>(), f[3].trim().parse::<f64>()) else {
            continue;
        };
        s.entry(f[0].into())
            .or_default()
            .entry(f[1].into())
            .or_default()
            .entry(round)
            .or_default()
            .push(v);
    }
    s
}

/// The four `|`-separated fields of each line of a guest's failure list
/// (`bench-failures.txt`, `matrix-failures.txt`), the last one taking the
/// rest of the line; lines with fewer fields are skipped.
pub fn failure_lines(text: &str) -> impl Iterator<Item = [&str; 4]> {
    text.lines().filter_map(|l| {
        let mut f = l.splitn(4, '|');
        Some([f.next()?, f.next()?, f.next()?, f.next()?])
    })
}

/// The first value of `section`/`config` of each round.
pub fn by_round(s: &Samples, section: &str, config: &str) -> BTreeMap<u32, f64> {
    s.get(section)
        .and_then(|m| m.get(config))
        .map(|r| {
            r.iter()
                .filter_map(|(&round, v)| Some((round, *v.first()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// IOPS in thousands: `17.9K`.
pub fn kiops(v: f64) -> String {
    format!("{:.1}K", v / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv() {
        let s = parse_csv("ratio,qd16/c,2,51000\nbad line\nratio,qd16/c,x,1\n");
        assert_eq!(
            by_round(&s, "ratio", "qd16/c"),
            BTreeMap::from([(2, 51000.0)])
        );
        let s = parse_csv("ratio,qd1/c,2,7\nratio,qd1/c,1,5\nratio,qd1/c,1,6\n");
        assert_eq!(
            by_round(&s, "ratio", "qd1/c"),
            BTreeMap::from([(1, 5.0), (2, 7.0)])
        );
        assert!(by_round(&s, "ratio", "qd16/c").is_empty());
        assert!(by_round(&s, "matrix", "qd1/c").is_empty());
        assert_eq!(kiops(17890.0), "17.9K");
    }
}
