//! `--metrics ADDR`: the run's [`Counters`] in the Prometheus text format (version 0.0.4),
//! served over HTTP at `/metrics` for a fleet's scraper, whatever the sink.
//!
//! The endpoint has a thread of its own: a scrape is answered while the run's single-threaded
//! runtime is busy (a long copy, a large transaction), and it reads a copy of the counters
//! taken under their lock, never the pipeline itself. The text is written by
//! `prometheus-client`'s encoder from a [`Collector`] that turns each scrape's copy into metric
//! families; nothing here formats the exposition format by hand.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `rowid_cdc_changes_total` | counter | `relation`, `op` | changes the sink made durable (`op`: insert, update, delete, truncate, snapshot, unidentified) |
//! | `rowid_cdc_transactions_total` | counter | | the stream's transactions the sink made durable |
//! | `rowid_cdc_unidentified_changes_total` | counter | | durable changes without identity (all relations) |
//! | `rowid_cdc_refused_changes_total` | counter | | changes that stopped the run (`--strict`, `--require-complete`) |
//! | `rowid_cdc_durable_lsn` | gauge | | where a restart resumes (the LSN as a number) |
//! | `rowid_cdc_server_wal_end_lsn` | gauge | | the highest WAL position the server reported |
//! | `rowid_cdc_lag_bytes` | gauge | | WAL the server reported beyond the durable position |
//! | `rowid_cdc_seconds_since_last_commit` | gauge | | since the sink last made a transaction durable (absent before the first) |
//! | `rowid_cdc_snapshot_rows_total` | counter | | snapshot rows the sink made durable |
//! | `rowid_cdc_snapshot_tables_done` | gauge | | snapshot tables done (initial copy and chunks) |
//! | `rowid_cdc_snapshot_tables` | gauge | | snapshot tables in all |
//! | `rowid_cdc_publish_acks_pending` | gauge | | publications the sink's server has not acknowledged yet (the NATS sink; 0 for the others) |
//! | `rowid_cdc_reconnects_total` | counter | | connections lost and the run started again from the durable position |
//! | `rowid_cdc_notices_total` | counter | | notices (also printed on stderr) |
//!
//! Counts start at zero with each process: a restarted run's counters do not include the
//! runs before it (the durable position does).

use std::fmt;
use std::net::SocketAddr;
use std::time::SystemTime;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::counters::{Counters, SharedCounters};
use crate::error::{CdcError, setup};
use crate::event::Op;

/// The content type of the Prometheus text format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `counters` at `http://ADDR/metrics` on a thread of its own until the process ends;
/// returns the address it listens on (`ADDR` may ask for port 0).
pub fn serve(addr: SocketAddr, counters: SharedCounters) -> Result<SocketAddr, CdcError> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| setup(format!("--metrics {addr}: cannot listen there: {e}")))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| setup(format!("--metrics {addr}: not an IP address")))?;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(CountersCollector(counters)));
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for request in server.incoming_requests() {
                let response = respond(&registry, request.method(), request.url());
                // A scraper that went away mid-answer is its own business.
                let _ = request.respond(response);
            }
        })
        .map_err(|e| setup(format!("--metrics {addr}: cannot start its thread: {e}")))?;
    Ok(bound)
}

/// The answer to one request: the metrics for `GET /metrics`, 404 or 405 otherwise.
fn respond(
    registry: &Registry,
    method: &tiny_http::Method,
    url: &str,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let path = url.split('?').next().unwrap_or_default();
    if path != "/metrics" {
        return tiny_http::Response::from_string("not found: the metrics are at /metrics\n")
            .with_status_code(404);
    }
    if !matches!(method, tiny_http::Method::Get | tiny_http::Method::Head) {
        return tiny_http::Response::from_string("only GET\n").with_status_code(405);
    }
    match text(registry) {
        Ok(body) => {
            let response = tiny_http::Response::from_string(body);
            match tiny_http::Header::from_bytes(&b"Content-Type"[..], CONTENT_TYPE.as_bytes()) {
                Ok(header) => response.with_header(header),
                Err(()) => response,
            }
        }
        Err(_) => tiny_http::Response::from_string("the metrics could not be encoded\n")
            .with_status_code(500),
    }
}

/// The registry's metrics in the Prometheus text format.
fn text(registry: &Registry) -> Result<String, fmt::Error> {
    let mut body = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut body, registry)?;
    Ok(body)
}

/// Turns each scrape's copy of the counters into metric families.
#[derive(Debug)]
struct CountersCollector(SharedCounters);

impl Collector for CountersCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let c: Counters = self.0.snapshot();
        let changes = ConstCounter::new(0u64);
        let mut family = encoder.encode_descriptor(
            "rowid_cdc_changes",
            "Changes the sink made durable, by relation and operation",
            None,
            changes.metric_type(),
        )?;
        for ((relation, op), n) in &c.changes {
            let labels = [("relation", relation.as_ref()), ("op", op.name())];
            ConstCounter::new(*n).encode(family.encode_family(&labels)?)?;
        }
        let unidentified = c
            .changes
            .iter()
            .filter(|((_, op), _)| *op == Op::Unidentified)
            .map(|(_, n)| n)
            .sum();
        let counters: [(&str, &str, u64); 6] = [
            (
                "rowid_cdc_transactions",
                "The stream's transactions the sink made durable",
                c.transactions,
            ),
            (
                "rowid_cdc_unidentified_changes",
                "Durable changes without identity, all relations",
                unidentified,
            ),
            (
                "rowid_cdc_refused_changes",
                "Changes that stopped the run (--strict, --require-complete)",
                c.refused,
            ),
            (
                "rowid_cdc_snapshot_rows",
                "Snapshot rows the sink made durable",
                c.snapshot_rows(),
            ),
            (
                "rowid_cdc_reconnects",
                "Connections lost and the run started again from the durable position",
                c.reconnects,
            ),
            (
                "rowid_cdc_notices",
                "Notices, as printed on stderr",
                c.notices,
            ),
        ];
        for (name, help, value) in counters {
            one(&mut encoder, name, help, &ConstCounter::new(value))?;
        }
        let gauges: [(&str, &str, u64); 6] = [
            (
                "rowid_cdc_durable_lsn",
                "Where a restart resumes: the end of the last durable transaction, as a number",
                c.durable.0,
            ),
            (
                "rowid_cdc_server_wal_end_lsn",
                "The highest WAL position the server reported, as a number",
                c.server_end.0,
            ),
            (
                "rowid_cdc_lag_bytes",
                "WAL the server reported beyond the durable position, in bytes",
                c.lag_bytes(),
            ),
            (
                "rowid_cdc_snapshot_tables_done",
                "Snapshot tables done (initial copy and chunks)",
                c.snapshot_tables.0,
            ),
            (
                "rowid_cdc_snapshot_tables",
                "Snapshot tables in all",
                c.snapshot_tables.1,
            ),
            (
                "rowid_cdc_publish_acks_pending",
                "Publications the sink's server has not acknowledged yet (NATS; 0 otherwise)",
                c.acks_pending,
            ),
        ];
        for (name, help, value) in gauges {
            one(&mut encoder, name, help, &ConstGauge::new(value))?;
        }
        if let Some(at) = c.last_commit {
            let since = SystemTime::now()
                .duration_since(at)
                .unwrap_or_default()
                .as_secs_f64();
            one(
                &mut encoder,
                "rowid_cdc_seconds_since_last_commit",
                "Seconds since the sink last made a transaction durable",
                &ConstGauge::new(since),
            )?;
        }
        Ok(())
    }
}

/// One metric without labels.
fn one<M: EncodeMetric + TypedMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: &M,
) -> Result<(), fmt::Error> {
    let kind: MetricType = M::TYPE;
    metric.encode(encoder.encode_descriptor(name, help, None, kind)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsn::Lsn;
    use std::sync::Arc;

    /// The exposition of known counters, line by line as the Prometheus text format writes
    /// them (the values are the counters', the names the documented ones).
    #[test]
    fn the_counters_in_the_text_format() {
        let shared = SharedCounters::new();
        {
            let mut c = shared.lock();
            c.changes.insert((Arc::from("public.t"), Op::Insert), 3);
            c.changes
                .insert((Arc::from("public.t"), Op::Unidentified), 2);
            c.changes.insert((Arc::from("s.\"odd\""), Op::Snapshot), 4);
            c.transactions = 5;
            c.durable = Lsn(1000);
            c.server_end = Lsn(1500);
            c.snapshot_tables = (1, 2);
            c.reconnects = 1;
        }
        let mut registry = Registry::default();
        registry.register_collector(Box::new(CountersCollector(shared.clone())));
        let body = text(&registry).expect("encodes");
        for line in [
            "# TYPE rowid_cdc_changes_total counter",
            "rowid_cdc_changes_total{relation=\"public.t\",op=\"insert\"} 3",
            "rowid_cdc_changes_total{relation=\"public.t\",op=\"unidentified\"} 2",
            "rowid_cdc_changes_total{relation=\"s.\\\"odd\\\"\",op=\"snapshot\"} 4",
            "rowid_cdc_transactions_total 5",
            "rowid_cdc_unidentified_changes_total 2",
            "rowid_cdc_snapshot_rows_total 4",
            "rowid_cdc_reconnects_total 1",
            "rowid_cdc_refused_changes_total 0",
            "# TYPE rowid_cdc_durable_lsn gauge",
            "rowid_cdc_durable_lsn 1000",
            "rowid_cdc_server_wal_end_lsn 1500",
            "rowid_cdc_lag_bytes 500",
            "rowid_cdc_snapshot_tables_done 1",
            "rowid_cdc_snapshot_tables 2",
            "rowid_cdc_publish_acks_pending 0",
        ] {
            assert!(
                body.lines().any(|l| l == line),
                "missing line {line:?} in:\n{body}"
            );
        }
        // No commit yet: no age of the last one.
        assert!(!body.contains("seconds_since_last_commit"), "{body}");
        shared.lock().last_commit = Some(SystemTime::now());
        let body = text(&registry).expect("encodes");
        assert!(
            body.lines()
                .any(|l| l.starts_with("rowid_cdc_seconds_since_last_commit 0.")),
            "{body}"
        );
    }

    /// Only `GET /metrics` (and HEAD) answers with the metrics.
    #[test]
    fn other_paths_and_methods_are_refused() {
        let registry = Registry::default();
        let status = |m: tiny_http::Method, url: &str| respond(&registry, &m, url).status_code().0;
        assert_eq!(status(tiny_http::Method::Get, "/metrics"), 200);
        assert_eq!(status(tiny_http::Method::Get, "/metrics?x=1"), 200);
        assert_eq!(status(tiny_http::Method::Get, "/"), 404);
        assert_eq!(status(tiny_http::Method::Post, "/metrics"), 405);
    }
}
