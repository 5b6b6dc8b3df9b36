//! The process and runtime metrics every Prometheus client library exports under the standard
//! names (`process_*`, as Go's and client-go's; the runtime's as `tokio_*`), read at scrape time
//! from `/proc/self` (through the procfs crate, which parses it) and the tokio runtime the scrape
//! runs on. Nothing is read between scrapes. kubert-prometheus-process would be the whole
//! collector, but it is built on an older prometheus-client than Weft's.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// What `/proc/self/stat` (and `/proc/stat`'s boot time) say about this process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessStat {
    /// User plus system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident set size, bytes.
    pub resident_bytes: u64,
    /// Virtual memory size, bytes.
    pub virtual_bytes: u64,
    /// Unix time the process started, seconds.
    pub start_time_seconds: f64,
}

fn read_stat() -> Option<ProcessStat> {
    let stat = procfs::process::Process::myself().ok()?.stat().ok()?;
    let boot = procfs::boot_time_secs().ok()?;
    let ticks = procfs::ticks_per_second() as f64;
    Some(ProcessStat {
        cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
        resident_bytes: stat.rss * procfs::page_size(),
        virtual_bytes: stat.vsize,
        start_time_seconds: boot as f64 + stat.starttime as f64 / ticks,
    })
}

fn open_fds() -> Option<u64> {
    let n = procfs::process::Process::myself().ok()?.fd_count().ok()?;
    Some(n as u64)
}

/// The soft limit of open files; `None` when unlimited or unreadable.
fn max_fds() -> Option<u64> {
    let limits = procfs::process::Process::myself().ok()?.limits().ok()?;
    match limits.max_open_files.soft_limit {
        procfs::process::LimitValue::Value(n) => Some(n),
        procfs::process::LimitValue::Unlimited => None,
    }
}

/// The collector of the standard process metrics and the tokio runtime gauges.
#[derive(Debug, Default)]
pub struct ProcessCollector;

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: f64,
) -> Result<(), std::fmt::Error> {
    let g = ConstGauge::new(value);
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(s) = read_stat() {
            let cpu = ConstCounter::new(s.cpu_seconds);
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                cpu.metric_type(),
            )?)?;
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                s.resident_bytes as f64,
            )?;
            gauge(
                &mut encoder,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                s.virtual_bytes as f64,
            )?;
            gauge(
                &mut encoder,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                s.start_time_seconds,
            )?;
        }
        if let Some(n) = open_fds() {
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors",
                n as f64,
            )?;
        }
        if let Some(n) = max_fds() {
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors",
                n as f64,
            )?;
        }
        // The scrape is served on the daemon's runtime; elsewhere (a unit test) there is none.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let m = handle.metrics();
            gauge(
                &mut encoder,
                "tokio_workers",
                "Worker threads of the tokio runtime",
                m.num_workers() as f64,
            )?;
            gauge(
                &mut encoder,
                "tokio_alive_tasks",
                "Tasks alive on the tokio runtime (as Go's go_goroutines)",
                m.num_alive_tasks() as f64,
            )?;
            gauge(
                &mut encoder,
                "tokio_global_queue_depth",
                "Tasks waiting in the tokio runtime's global queue",
                m.global_queue_depth() as f64,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let s = read_stat().expect("/proc/self/stat");
        assert!(s.resident_bytes > 0);
        assert!(s.start_time_seconds > 1_600_000_000.0);
        assert!(open_fds().unwrap() > 0);
        assert!(max_fds().unwrap() > 0);
    }
}
