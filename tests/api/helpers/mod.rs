//! Shared test harness: real databases, the real proxy on a random port, and
//! the strict fake upstream.

pub mod admin;
pub mod agent;
pub mod app;
pub mod browser;
pub mod db;
pub mod fixtures;
pub mod fleet;
pub mod minimal_dialect;
pub mod otlp;
pub mod process;
pub mod raw_client;
pub mod raw_upstream;
pub mod recorder;
pub mod responses;
pub mod tap;
pub mod tcp_relay;
pub mod wait;
