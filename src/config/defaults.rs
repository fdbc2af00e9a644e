//! Beside the flow, configuration: defaults.
//!
//! Named defaults, one function per setting, so each appears once.

use std::net::SocketAddr;
use std::time::Duration;

pub fn listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
pub fn database_url() -> String {
    "sqlite://condenser.db".into()
}
/// Generous: agent requests with images and long tool output reach several MB.
pub fn max_body_bytes() -> usize {
    32 * 1024 * 1024
}
pub fn shutdown_grace() -> Duration {
    Duration::from_secs(30)
}
pub fn connect_timeout() -> Duration {
    Duration::from_secs(10)
}
/// Non-streamed completions of long outputs can take minutes before the headers.
pub fn first_byte_timeout() -> Duration {
    Duration::from_secs(600)
}
pub fn idle_timeout() -> Duration {
    Duration::from_secs(300)
}
/// Below the 5 s keep-alive of llama.cpp, uvicorn (vLLM) and Node servers:
/// a connection they have closed is never reused, which would fail the
/// request sent on it ("connection closed before message completed").
pub fn pool_idle_timeout() -> Duration {
    Duration::from_secs(4)
}
pub fn max_connections() -> u32 {
    10
}
/// Short, so a dead database turns into degraded forwarding instead of a hang.
pub fn acquire_timeout() -> Duration {
    Duration::from_secs(2)
}
pub fn degraded_retry() -> Duration {
    Duration::from_secs(5)
}
pub fn write_queue_bytes() -> usize {
    64 * 1024 * 1024
}
/// At 1,000 requests a second, 10 ms made 100 commits a second and about
/// 1.7 context switches a request; 200 ms five commits a second
/// (bench/README.md, "Context switches per request").
pub fn write_linger() -> Duration {
    Duration::from_millis(200)
}
/// A group commit takes milliseconds; seconds cover a database that is
/// slow at that moment, and still fit a container's stop timeout.
pub fn flush_deadline() -> Duration {
    Duration::from_secs(5)
}

/// A working day: long enough not to log an operator out mid-task.
pub fn admin_session_ttl() -> Duration {
    Duration::from_secs(12 * 3600)
}

pub fn maintenance_interval() -> Duration {
    Duration::from_secs(300)
}
pub fn max_compactions() -> u32 {
    2
}
pub fn summary_max_tokens() -> u64 {
    2000
}
pub fn summary_role() -> String {
    "user".into()
}
pub fn keep_share() -> f64 {
    0.5
}
pub fn headroom_turns() -> u32 {
    2
}
pub fn keepalive_interval() -> Duration {
    Duration::from_secs(3)
}
pub fn lease_ttl() -> Duration {
    Duration::from_secs(15)
}
pub fn summary_timeout() -> Duration {
    Duration::from_secs(300)
}
pub fn max_summary_calls() -> u32 {
    4
}
pub fn proactive_threshold() -> f64 {
    1.0
}

impl Default for super::Timeouts {
    fn default() -> Self {
        Self {
            connect: connect_timeout(),
            first_byte: first_byte_timeout(),
            idle: idle_timeout(),
            pool_idle: pool_idle_timeout(),
        }
    }
}

impl Default for super::StorageSettings {
    fn default() -> Self {
        Self {
            max_connections: max_connections(),
            acquire_timeout: acquire_timeout(),
            allow_degraded_start: false,
            degraded_retry: degraded_retry(),
            tenant_salt: String::new(),
            retention: None,
            prune_branches_after: None,
            maintenance_interval: maintenance_interval(),
            write_queue_bytes: write_queue_bytes(),
            write_linger: write_linger(),
            flush_deadline: flush_deadline(),
        }
    }
}

impl Default for super::CompactionSettings {
    fn default() -> Self {
        Self {
            max_compactions: max_compactions(),
            summary_max_tokens: summary_max_tokens(),
            summary_model: None,
            summary_role: summary_role(),
            keep_share: keep_share(),
            headroom_turns: headroom_turns(),
            keepalive_interval: keepalive_interval(),
            lease_ttl: lease_ttl(),
            summary_timeout: summary_timeout(),
            max_summary_calls: max_summary_calls(),
            proactive_threshold: proactive_threshold(),
            item_key: None,
        }
    }
}
