//! Beside the flow, configuration: the listener.
//!
//! How the listening side treats clients: what a slow or idle one may hold,
//! and how many chat bytes may be read and parsed at once.

use super::ConfigError;
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSettings {
    /// Longest wait for a request's head, from the first byte or from the
    /// end of the previous response on a kept-alive connection.
    #[serde(default = "header_read_timeout", with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// At the connection cap, how long a connection without a request in
    /// flight (a head not yet complete, or idle between requests) is kept
    /// before it is closed to make room.
    #[serde(default = "header_read_timeout_at_cap", with = "humantime_serde")]
    pub header_read_timeout_at_cap: Duration,
    /// A connection with no request in flight this long is closed (HTTP/2
    /// as well as HTTP/1.1).
    #[serde(default = "idle_timeout", with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Longest silence while a request body is read.
    #[serde(default = "body_read_timeout", with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// Longest a whole request body may take to arrive, however steadily.
    #[serde(default = "body_total_timeout", with = "humantime_serde")]
    pub body_total_timeout: Duration,
    /// Client connections open at once; more wait in the listen backlog.
    #[serde(default = "max_connections")]
    pub max_connections: usize,
    /// Threads serving client connections, each connection on one of
    /// them; 0, one per CPU the process may use.
    #[serde(default)]
    pub connection_threads: usize,
    /// The scheduling slice each connection thread asks the kernel for
    /// (Linux 6.12 and later); zero keeps the kernel's default.
    #[serde(default = "connection_thread_slice", with = "humantime_serde")]
    pub connection_thread_slice: Duration,
    /// Chat request bodies read and parsed at once, weighed in bytes of the
    /// costliest shape (`http/weight.rs`); unset, derived from the memory
    /// available (see [`ServerSettings::inflight_body_budget`]).
    #[serde(default)]
    pub max_inflight_body_bytes: Option<usize>,
    /// Whether the Responses API's WebSocket mode is served; off, an
    /// upgrade is answered 426 so clients fall back to HTTPS at once.
    #[serde(default = "responses_websocket")]
    pub responses_websocket: bool,
    /// The largest frame a WebSocket client may send; unset,
    /// `max_body_bytes`, as an HTTP body.
    #[serde(default)]
    pub websocket_max_frame_bytes: Option<usize>,
    /// A WebSocket with no frame in flight and none arriving this long is
    /// closed.
    #[serde(default = "websocket_idle_timeout", with = "humantime_serde")]
    pub websocket_idle_timeout: Duration,
    /// WebSockets one credential may hold open at once.
    #[serde(default = "websocket_connections_per_tenant")]
    pub websocket_connections_per_tenant: usize,
}

/// hyper's own default, which only takes effect with a timer set.
fn header_read_timeout() -> Duration {
    Duration::from_secs(30)
}
/// Long enough for a client on a slow link to send its head once it is
/// connected, short enough that a backlog of silent connections twice the
/// cap drains within a second or two.
fn header_read_timeout_at_cap() -> Duration {
    Duration::from_millis(500)
}
/// As long as a kept-alive HTTP/1.1 connection may idle (the header timeout).
fn idle_timeout() -> Duration {
    Duration::from_secs(30)
}
/// nginx's `client_body_timeout`.
fn body_read_timeout() -> Duration {
    Duration::from_secs(60)
}
/// A 32 MiB body at 1 Mbit/s takes under 5 minutes.
fn body_total_timeout() -> Duration {
    Duration::from_secs(300)
}
/// About one small request's burst of work on a connection thread (50 to
/// 150 µs here), with room: a slice much shorter than a thread's bursts
/// preempts it for nothing, a longer one lets the peers it wakes preempt
/// it (`threads::ask_for_slice`; bench/README.md, "Context switches per
/// request").
fn connection_thread_slice() -> Duration {
    Duration::from_micros(300)
}
/// Lowered at start to what the file-descriptor limit allows.
fn max_connections() -> usize {
    4096
}
/// Codex CLI, the client of this mode, uses it by default.
fn responses_websocket() -> bool {
    true
}
/// Long enough for a tool (a build, a test run) between two turns of an
/// agent; OpenAI closes its own sockets after 60 minutes.
fn websocket_idle_timeout() -> Duration {
    Duration::from_secs(15 * 60)
}
/// An agent holds one socket per session; a tenant running many sessions
/// side by side still fits, one client looping on connects does not.
fn websocket_connections_per_tenant() -> usize {
    64
}

/// Bytes of memory per unit of a chat body's weight: the unit is a byte
/// of the costliest shape measured, short messages (16.8 to 17.8 bytes of
/// memory per byte at their peak; `bench/body_budget.py --measure`,
/// bench/README.md "The chat body budget"), plus a fifth. Other shapes
/// weigh less per byte (`http/weight.rs`): a coding agent's history or an
/// image about a fifth. (It was 40 when every body was counted as the
/// costliest, from a build that kept more per message.)
pub const BODY_EXPANSION: u64 = 20;
/// Share of the memory that bodies in flight may expand into, by default:
/// the rest is the caches, the write queue, and whatever shares the machine.
pub const BODY_MEMORY_SHARE: u64 = 4;

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            header_read_timeout: header_read_timeout(),
            header_read_timeout_at_cap: header_read_timeout_at_cap(),
            idle_timeout: idle_timeout(),
            body_read_timeout: body_read_timeout(),
            body_total_timeout: body_total_timeout(),
            max_connections: max_connections(),
            connection_threads: 0,
            connection_thread_slice: connection_thread_slice(),
            max_inflight_body_bytes: None,
            responses_websocket: responses_websocket(),
            websocket_max_frame_bytes: None,
            websocket_idle_timeout: websocket_idle_timeout(),
            websocket_connections_per_tenant: websocket_connections_per_tenant(),
        }
    }
}

impl ServerSettings {
    pub(super) fn validate(&self, max_body_bytes: usize) -> Result<(), ConfigError> {
        if self.websocket_connections_per_tenant == 0 {
            return Err(ConfigError::invalid(
                "server.websocket_connections_per_tenant",
                "must be at least 1 (set server.responses_websocket = false to serve none)",
            ));
        }
        if self.websocket_max_frame_bytes == Some(0) {
            return Err(ConfigError::invalid(
                "server.websocket_max_frame_bytes",
                "must be at least 1",
            ));
        }
        if self.max_connections == 0 {
            return Err(ConfigError::invalid(
                "server.max_connections",
                "must be at least 1",
            ));
        }
        for (key, value) in [
            ("server.header_read_timeout", self.header_read_timeout),
            (
                "server.header_read_timeout_at_cap",
                self.header_read_timeout_at_cap,
            ),
            ("server.idle_timeout", self.idle_timeout),
            ("server.body_read_timeout", self.body_read_timeout),
            ("server.body_total_timeout", self.body_total_timeout),
            ("server.websocket_idle_timeout", self.websocket_idle_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::invalid(key, "must be longer than 0s"));
            }
        }
        let slice = self.connection_thread_slice;
        if !slice.is_zero()
            && !(Duration::from_micros(100)..=Duration::from_millis(100)).contains(&slice)
        {
            return Err(ConfigError::invalid(
                "server.connection_thread_slice",
                "must be 0s (the kernel's default) or between 100us and 100ms",
            ));
        }
        if self.header_read_timeout_at_cap > self.header_read_timeout {
            return Err(ConfigError::invalid(
                "server.header_read_timeout_at_cap",
                "must not be longer than server.header_read_timeout",
            ));
        }
        if self
            .max_inflight_body_bytes
            .is_some_and(|budget| budget < max_body_bytes)
        {
            return Err(ConfigError::invalid(
                "server.max_inflight_body_bytes",
                "must be at least max_body_bytes, so that one largest body fits",
            ));
        }
        Ok(())
    }

    /// The largest frame a WebSocket client may send.
    pub fn websocket_max_frame(&self, max_body_bytes: usize) -> usize {
        self.websocket_max_frame_bytes.unwrap_or(max_body_bytes)
    }

    /// The configured budget, else a quarter of the memory available
    /// at [`BODY_EXPANSION`] bytes per unit of weight, never below one
    /// largest body.
    pub fn inflight_body_budget(&self, max_body_bytes: usize) -> usize {
        if let Some(configured) = self.max_inflight_body_bytes {
            return configured;
        }
        let derived = memory_available().map_or(usize::MAX, |memory| {
            usize::try_from(memory / BODY_MEMORY_SHARE / BODY_EXPANSION).unwrap_or(usize::MAX)
        });
        derived.max(max_body_bytes)
    }
}

/// The memory this process may use: its cgroup's limit when one is set
/// (containers), else the machine's.
pub fn memory_available() -> Option<u64> {
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .into_iter()
    .filter_map(|path| std::fs::read_to_string(path).ok())
    .find_map(|text| cgroup_limit(&text));
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_total(&text));
    match (cgroup, total) {
        (Some(limit), Some(total)) => Some(limit.min(total)),
        (limit, total) => limit.or(total),
    }
}

/// A cgroup's limit in bytes; `max` (v2) or a page-rounded `i64::MAX` (v1)
/// means none.
fn cgroup_limit(text: &str) -> Option<u64> {
    let limit: u64 = text.trim().parse().ok()?;
    (limit < 1 << 60).then_some(limit)
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_limits_are_read_and_unlimited_is_none() {
        assert_eq!(cgroup_limit("2147483648\n"), Some(2 << 30));
        assert_eq!(cgroup_limit("max\n"), None);
        assert_eq!(cgroup_limit("9223372036854771712\n"), None);
    }

    #[test]
    fn mem_total_is_read_in_bytes() {
        let meminfo = "MemTotal:       24684080 kB\nMemFree:        16684080 kB\n";
        assert_eq!(mem_total(meminfo), Some(24_684_080 * 1024));
    }

    #[test]
    fn a_budget_below_one_largest_body_or_a_zero_timeout_is_refused() {
        let small = ServerSettings {
            max_inflight_body_bytes: Some(1 << 20),
            ..ServerSettings::default()
        };
        assert!(small.validate(2 << 20).is_err());
        assert!(small.validate(1 << 20).is_ok());
        let zero = ServerSettings {
            body_total_timeout: Duration::ZERO,
            ..ServerSettings::default()
        };
        assert!(zero.validate(1 << 20).is_err());
    }

    #[test]
    fn the_derived_budget_never_falls_below_one_largest_body() {
        let settings = ServerSettings::default();
        let largest = usize::MAX / 2;
        assert_eq!(settings.inflight_body_budget(largest), largest);
        let configured = ServerSettings {
            max_inflight_body_bytes: Some(5 << 20),
            ..ServerSettings::default()
        };
        assert_eq!(configured.inflight_body_budget(1 << 20), 5 << 20);
    }
}
