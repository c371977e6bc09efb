//! A Prometheus metric as the code that registers it and the dashboards that query it both
//! name it: its prefix and name, its kind and its help text.

/// The content type of OpenMetrics text, as prometheus-client writes it.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What kind of metric it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Counts up; its samples are named `NAME_total`.
    Counter,
    /// A value now.
    Gauge,
}

impl Kind {
    /// Its name on a `# TYPE` line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// One metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// The prefix of its exporter's names (`fault_server`, `harness`).
    pub prefix: &'static str,
    /// Its name under the prefix.
    pub name: &'static str,
    /// Its kind.
    pub kind: Kind,
    /// Its help text.
    pub help: &'static str,
    /// Whether every exporter exports it (`false`: only some, as the fault server's PostgreSQL
    /// pool's).
    pub always: bool,
}

impl Metric {
    /// The family's name, as `# TYPE` and `# HELP` give it: `fault_server_requests`.
    pub fn family(&self) -> String {
        format!("{}_{}", self.prefix, self.name)
    }

    /// The name a query uses: `fault_server_requests_total`, `fault_server_open_connections`.
    pub fn series(&self) -> String {
        match self.kind {
            Kind::Counter => format!("{}_total", self.family()),
            Kind::Gauge => self.family(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_s_samples_end_in_total_and_a_gauge_s_do_not() {
        let m = |kind| Metric {
            prefix: "p",
            name: "n",
            kind,
            help: "h",
            always: true,
        };
        assert_eq!(m(Kind::Counter).family(), "p_n");
        assert_eq!(m(Kind::Counter).series(), "p_n_total");
        assert_eq!(m(Kind::Gauge).series(), "p_n");
        assert_eq!(Kind::Gauge.name(), "gauge");
    }
}
