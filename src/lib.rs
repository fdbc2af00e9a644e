//! Condenser: a context-compacting reverse proxy for LLM APIs.
//!
//! Modules follow one request through the proxy (see DESIGN.md):
//! `http` accepts and routes, `conversation` identifies, `store` persists,
//! `pipeline` rewrites and retries, `upstream` forwards and streams back,
//! `overflow` detects context overflow, `compaction` plans and summarizes.

pub mod app;
pub mod cli;
pub mod compaction;
pub mod config;
pub mod conversation;
pub mod error;
pub mod format;
pub mod http;
pub mod maintenance;
pub mod metrics;
pub mod overflow;
pub mod pipeline;
pub mod protocol;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod tokens;
pub mod upstream;
pub mod web;
