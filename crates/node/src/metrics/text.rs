//! The Prometheus text format (0.0.4) from prometheus-client's OpenMetrics
//! text: what a scraper asking for `text/plain` and `promtool check
//! metrics` read. A counter's metadata is named as its samples are
//! (`leasehold_grants_total`), units and `# EOF` go, and an info family
//! becomes a gauge of its `_info` samples.

/// `openmetrics` (prometheus-client's encoding) in the Prometheus text
/// format.
pub(crate) fn prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut counters = std::collections::BTreeSet::new();
    let mut infos = std::collections::BTreeSet::new();
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" counter") {
                counters.insert(name.to_string());
            } else if let Some(name) = rest.strip_suffix(" info") {
                infos.insert(name.to_string());
            }
        }
    }
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = line
            .strip_prefix("# HELP ")
            .map(|rest| ("# HELP ", rest))
            .or_else(|| line.strip_prefix("# TYPE ").map(|rest| ("# TYPE ", rest)));
        if let Some((kind, rest)) = meta {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let renamed = if counters.contains(name) {
                format!("{name}_total")
            } else if infos.contains(name) {
                format!("{name}_info")
            } else {
                name.to_string()
            };
            let tail = match (kind, tail) {
                ("# TYPE ", "info") => "gauge",
                _ => tail,
            };
            out.push_str(kind);
            out.push_str(&renamed);
            out.push(' ');
            out.push_str(tail);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::prometheus_text;

    #[test]
    fn counters_metadata_is_named_as_their_samples_and_eof_goes() {
        let om = "# HELP leasehold_grants Locks granted.\n# TYPE leasehold_grants counter\nleasehold_grants_total 3\n# HELP leasehold_build Build.\n# TYPE leasehold_build info\nleasehold_build_info{version=\"1\"} 1\n# HELP x_seconds X.\n# TYPE x_seconds gauge\n# UNIT x_seconds seconds\nx_seconds 1\n# EOF\n";
        assert_eq!(
            prometheus_text(om),
            "# HELP leasehold_grants_total Locks granted.\n# TYPE leasehold_grants_total counter\nleasehold_grants_total 3\n# HELP leasehold_build_info Build.\n# TYPE leasehold_build_info gauge\nleasehold_build_info{version=\"1\"} 1\n# HELP x_seconds X.\n# TYPE x_seconds gauge\nx_seconds 1\n"
        );
    }
}
