//! Beside the flow, the crate: its modules, named below in data-flow order.
//!
//! Condenser: a context-compacting reverse proxy for LLM APIs.
//!
//! Modules follow one request through the proxy (see ARCHITECTURE.md):
//! `http` accepts and routes, `conversation` identifies, `store` persists,
//! `pipeline` rewrites and retries, `upstream` forwards and streams back,
//! `overflow` detects context overflow, `compaction` plans and summarizes,
//! `tokens` knows the sizes they all need.

pub mod config;
pub mod domain;
pub mod error;
pub mod format;
pub mod metrics;
pub mod telemetry;
pub mod threads;

pub mod compaction;
pub mod conversation;
pub mod http;
pub mod overflow;
pub mod pipeline;
pub mod protocol;
pub mod store;
pub mod tokens;
pub mod upstream;

pub mod app;
pub mod cli;
pub mod maintenance;
pub mod state;
pub mod web;
