//! The process and runtime metrics every Prometheus client library exports under the standard
//! names (`process_*`, as Go's and client-go's; the runtime's as `tokio_*`), read at scrape time
//! from `/proc/self` and the tokio runtime the scrape runs on. Nothing is read between scrapes.

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

/// Parse `/proc/self/stat` (`stat`) with the boot time `boot_time` (seconds since the epoch),
/// `ticks` clock ticks per second and `page_size` bytes per page. Pure.
pub fn parse_stat(stat: &str, boot_time: u64, ticks: f64, page_size: u64) -> Option<ProcessStat> {
    // The command name (field 2) is in parentheses and may hold spaces or parentheses itself:
    // the fields that follow start after the last ')'. There, index 0 is field 3 (state).
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let (utime, stime) = (field(14)?, field(15)?);
    let start_ticks = field(22)?;
    Some(ProcessStat {
        cpu_seconds: (utime + stime) as f64 / ticks,
        resident_bytes: field(24)? * page_size,
        virtual_bytes: field(23)?,
        start_time_seconds: boot_time as f64 + start_ticks as f64 / ticks,
    })
}

/// The boot time (`btime`) of `/proc/stat`'s text. Pure.
pub fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of open files in `/proc/self/limits`' text. Pure.
pub fn parse_max_fds(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn read_stat() -> Option<ProcessStat> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let boot = parse_boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
    // SAFETY: sysconf only reads a system constant.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if ticks <= 0 || page <= 0 {
        return None;
    }
    parse_stat(&stat, boot, ticks as f64, page as u64)
}

fn open_fds() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
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
        let limits = std::fs::read_to_string("/proc/self/limits").ok();
        if let Some(n) = limits.as_deref().and_then(parse_max_fds) {
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
    fn parses_stat_with_a_command_name_that_holds_spaces_and_parentheses() {
        // Fields 3..24 of a real line; utime 250, stime 50, starttime 1000, vsize 4096000,
        // rss 300 pages.
        let stat = "4242 (we ft) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 \
                    1000 4096000 300 18446744073709551615";
        let s = parse_stat(stat, 1_700_000_000, 100.0, 4096).unwrap();
        assert_eq!(s.cpu_seconds, 3.0);
        assert_eq!(s.resident_bytes, 300 * 4096);
        assert_eq!(s.virtual_bytes, 4_096_000);
        assert_eq!(s.start_time_seconds, 1_700_000_010.0);
        assert_eq!(parse_stat("garbage", 0, 100.0, 4096), None);
    }

    #[test]
    fn parses_boot_time_and_the_open_files_limit() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63422                63422                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Some(1024));
    }

    #[test]
    fn reads_this_process() {
        let s = read_stat().expect("/proc/self/stat");
        assert!(s.resident_bytes > 0);
        assert!(s.start_time_seconds > 1_600_000_000.0);
        assert!(open_fds().unwrap() > 0);
    }
}
